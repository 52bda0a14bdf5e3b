"""A stack file: read and validated before anything imports the Pulumi SDKs, so bad input is answered
at once (docs/architecture.md, "Stack file")."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from components.catalog import CLOUDS
from gpu_cluster.errors import UserError
from gpu_cluster.files import load_yaml

if TYPE_CHECKING:
    from components.spec import Cluster

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "gpu-cluster"
STACKS_DIR = ROOT / "stacks"
SAMPLE_STACKS = ("aws-entry", "aws-mid", "aws-large", "tencent-entry", "tencent-mid", "tencent-large",
                 "aws-scheduled", "aws-reserved", "tencent-scheduled", "tencent-prepaid")
CLUSTER_KEY = f"{PROJECT}:cluster"

STACK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
"""Pulumi stack names: letters, digits, hyphens, underscores and periods, at most 100 characters (Pulumi
documentation, "Stacks"; we also refuse a leading period, which would make a hidden plan file)."""
OUR_KEYS = ("gpu-cluster:cluster", "gpu-cluster:prices")
PROVIDER_KEYS = ("aws:region", "aws:profile", "tencentcloud:region")
"""The provider settings a stack file may hold: where, and with which local credentials profile. Any other
(aws:defaultTags, aws:ignoreTags, aws:endpoints, aws:assumeRole, tencentcloud:domain, …) would change what
`pulumi up` does in ways no offline plan, policy or review sees, so it is refused."""
TOP_KEYS = ("config", "secretsprovider", "encryptedkey", "encryptionsalt")
"""What a Pulumi stack file may hold besides `config` (its secrets provider settings). `environment` (Pulumi
ESC) is refused: it merges configuration from elsewhere into the stack at `pulumi up`, past the review."""


class StackFileError(UserError):
    """A stack file that cannot be read (missing, not YAML, no `config`, a bad provider setting)."""


@dataclass(frozen=True)
class StackFile:
    stack: str
    path: Path
    config: dict[str, Any]

    @property
    def regions(self) -> dict[str, Optional[str]]:
        return {c: self.config.get(f"{c}:region") for c in CLOUDS}


def stack_path(stack: str) -> Path:
    return STACKS_DIR / f"Pulumi.{stack}.yaml"


def known_stacks() -> list[str]:
    """The stacks with a file in stacks/, by name: what a wrong --stack is told it may name."""
    return sorted(stack_name_of(p) for p in STACKS_DIR.glob("Pulumi.*.yaml"))


def every_stack() -> list[str]:
    """Every stack with a file in stacks/, the samples first in their order, then the others by name:
    what `plan` and `review` cover by default, so a team's own stacks are gated like the samples."""
    order = {s: i for i, s in enumerate(SAMPLE_STACKS)}
    return sorted(known_stacks(), key=lambda s: (order.get(s, len(order)), s))


def stack_name_of(path: Path) -> str:
    """The stack a file configures: `Pulumi.<stack>.yaml` (Pulumi's naming), else the file's stem."""
    name = Path(path).name
    for suffix in (".yaml", ".yml"):
        if name.startswith("Pulumi.") and name.endswith(suffix):
            return name[len("Pulumi."):-len(suffix)]
    return Path(path).stem


def linked_stack_file(path: Path, stacks_dir: Optional[Path] = None) -> Optional[str]:
    """Why a stack file in `stacks_dir` (default: this checkout's stacks/) may not be read, or None: it is a
    symbolic link, or it resolves outside the repository (the folder above stacks/). A pull request could
    otherwise make a stack of any file on the machine and have its values echoed into the review. A file
    named outside stacks/ is the user's own choice."""
    stacks_dir = STACKS_DIR if stacks_dir is None else stacks_dir
    path = Path(os.path.abspath(path))
    if path.parent != stacks_dir:
        return None
    if path.is_symlink():
        return f"stack file {path} is a symbolic link; stack files in stacks/ must be regular files"
    resolved = path.resolve()
    if not resolved.is_relative_to(stacks_dir.parent.resolve()):
        return f"stack file {path} resolves to {resolved}, outside the repository; stack files in stacks/ must be in it"
    return None


def read_stack_file(path: Path, stack: Optional[str] = None) -> StackFile:
    """Read `Pulumi.<stack>.yaml`; the stack name comes from the file name unless given."""
    path = Path(path)
    refused = linked_stack_file(path)
    if refused:
        raise StackFileError(refused)
    try:
        doc = load_yaml(path, "stack file")
    except UserError as e:
        raise StackFileError(str(e)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise StackFileError(f"stack file {path} has no `config:` mapping")
    for key in doc:
        if key not in TOP_KEYS:
            why = (" (a Pulumi ESC environment merges configuration into the stack at `pulumi up`, which no "
                   "offline plan or review sees)" if key == "environment" else "")
            raise StackFileError(f"stack file {path}: top-level key {key!r} is not allowed{why}; allowed: "
                                 f"{', '.join(TOP_KEYS)}")
    config = doc["config"]
    if CLUSTER_KEY not in config:
        raise StackFileError(f"stack file {path} has no `{CLUSTER_KEY}` value")
    for key, value in config.items():
        if not isinstance(key, str):
            raise StackFileError(f"stack file {path}: config key {key!r} is not a string; keys are "
                                 f"<namespace>:<name>, e.g. aws:region")
        if key.startswith("gpu-cluster:") and key not in OUR_KEYS:
            raise StackFileError(f"stack file {path}: unknown config key {key!r}; allowed keys of gpu-cluster: "
                                 f"{', '.join(OUR_KEYS)}")
        if key.split(":", 1)[0] in CLOUDS and key not in PROVIDER_KEYS:
            raise StackFileError(f"stack file {path}: provider setting {key!r} is not allowed: it would change what "
                                 f"`pulumi up` does where no plan, policy or review sees it; allowed provider "
                                 f"settings: {', '.join(PROVIDER_KEYS)}")
        if key.endswith(":region") and not isinstance(value, str):
            raise StackFileError(f"stack file {path}: {key}={value!r} is not a region name; allowed: a string "
                                 f"such as {'us-east-1' if key.startswith('aws') else 'ap-shanghai'}")
    prices = config.get("gpu-cluster:prices")
    in_stacks = Path(os.path.abspath(path)).parent == STACKS_DIR
    if in_stacks and isinstance(prices, str) and prices.strip():
        target = (Path(os.path.abspath(path)).parent / prices).resolve()
        if Path(prices).is_absolute() or not target.is_relative_to(STACKS_DIR.parent.resolve()):
            raise StackFileError(f"stack file {path}: gpu-cluster:prices={prices!r} points outside the repository; "
                                 f"allowed: a price file in the repository, relative to the stack file "
                                 f"(e.g. ../prices/negotiated.yaml)")
    if stack is None:
        stack = stack_name_of(path)
    if not STACK_NAME.fullmatch(stack):
        raise StackFileError(f"stack file {path}: stack name {stack!r} (from the file name) is not a valid "
                             f"stack name; allowed: up to 100 letters, digits, '-', '_' and '.', not starting with '.' — "
                             f"name the file Pulumi.<stack>.yaml")
    return StackFile(stack=stack, path=path, config=config)


def validate(stack_file: StackFile) -> Cluster:
    """The validated cluster of a stack file, or `SpecError` — before anything is registered."""
    from components.spec import load_spec

    return load_spec(stack_file.config[CLUSTER_KEY], stack_file.regions)
