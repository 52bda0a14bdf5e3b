"""Test harness: render the real program under the project's one Mocks class (gpu_cluster/engine/).

`render_cluster(overrides)` renders a sample stack with changes applied to its `gpu-cluster:cluster`
value and returns the plan as a `Plan`; components are built inside each test, by the real
`__main__.py`, exactly as `pulumi up` would build them.
"""

from __future__ import annotations

import copy
import gc
import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from components.catalog import YAML_LOADER  # noqa: E402
from gpu_cluster.plan import Plan  # noqa: E402
from gpu_cluster.render import StackFile, read_stack_file, render, stack_path  # noqa: E402


def merge(base: dict, changes: dict) -> dict:
    """Deep-merge `changes` into a copy of `base`; a value of None replaces (sets null)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def stack_with(stack: str, changes: Optional[dict] = None, config: Optional[dict] = None) -> StackFile:
    """Sample stack `stack` with `changes` merged into its cluster value (and `config` into its config)."""
    base = read_stack_file(stack_path(stack))
    cfg = copy.deepcopy(base.config)
    cfg["gpu-cluster:cluster"] = merge(cfg["gpu-cluster:cluster"], changes or {})
    cfg.update(config or {})
    return StackFile(stack=base.stack, path=base.path, config=cfg)


_RENDERS: dict[str, Any] = {}


def rendered(stack_file: StackFile):
    """`render(stack_file)`, once per test process for equal stack files (a render is a pure function of the
    stack file). Each pytest-xdist worker renders for itself: sharing renders between the workers through
    pickled files saved nothing measurable (docs/benchmarks.md) and was removed. Its
    `plan()` makes a new document on each call, so a test may change what it gets; a render that fails is
    not kept, and fails again for the next test. A test that changes the mocks' answers calls `render`
    itself."""
    key = json.dumps([stack_file.stack, str(stack_file.path), stack_file.config], sort_keys=True)
    if key not in _RENDERS:
        _RENDERS[key] = render(stack_file)
        _keep_out_of_the_collectors_way()
    return _RENDERS[key]


def _keep_out_of_the_collectors_way() -> None:
    """Collect the render's garbage, then move everything alive into the collector's permanent
    generation (gc.freeze): the renders this session keeps are otherwise walked again by every full
    collection, which grew to a sixth of the suite's CPU as the kept heap grew (12 of 80 s). What is freed
    later by reference counting is still freed; a cycle among objects alive now is never collected: what
    the SDK's settings still hold of the last render (about 0.3 MB a render, some 80 renders a worker;
    the largest process's peak memory went from 252 to 300 MB)."""
    gc.collect()
    gc.freeze()


def load_yaml(text: str):
    """`text` parsed by libyaml's safe loader, as the program reads its own YAML (components.catalog): several
    times faster than PyYAML's pure-Python SafeLoader, which cloud-init parses user data with
    (cloudinit/safeyaml.py). tests/test_cloudinit.py asserts both read every sample stack's boot document
    alike, so a test that reads what a boot document holds reads it here."""
    return yaml.load(text, Loader=YAML_LOADER)  # noqa: S506 - a safe loader


def render_plan(stack: str, changes: Optional[dict] = None, config: Optional[dict] = None) -> Plan:
    return Plan.from_doc(rendered(stack_with(stack, changes, config)).plan())


TENCENT_UBUNTU_IMAGE = "img-u2404gpu"
"""A stand-in for the id of a user's Ubuntu 24.04 GPU image: a Tencent stack's own image_id is one (the Slurm boot
installs Ubuntu's packages there; on the default TencentOS image, OpenHPC's)."""


def slurm_stack_with(stack: str, changes: Optional[dict] = None, config: Optional[dict] = None) -> StackFile:
    """Sample stack `stack` with Slurm (every sample has it: on Tencent Cloud's default image from OpenHPC)."""
    return stack_with(stack, merge({"scheduler": "slurm"}, changes or {}), config)


_SLURM_CACHE: dict[str, Plan] = {}


def slurm_rendered(stack: str):
    """The render of a sample stack with Slurm (slurm_stack_with), once per test session (`rendered`)."""
    return rendered(slurm_stack_with(stack))


@pytest.fixture
def slurm_plan() -> Callable[[str], Plan]:
    """The Plan of a sample stack with Slurm (slurm_stack_with), rendered once per test session."""

    def get(stack: str) -> Plan:
        if stack not in _SLURM_CACHE:
            _SLURM_CACHE[stack] = Plan.from_doc(slurm_rendered(stack).plan())
        return _SLURM_CACHE[stack]

    return get


@pytest.fixture
def render_cluster() -> Callable[..., Plan]:
    """render_cluster("aws-large", {"nodes": 4}) → the Plan of that variant."""
    return render_plan


_CACHE: dict[str, Plan] = {}


@pytest.fixture
def sample_plan() -> Callable[[str], Plan]:
    """The Plan of an unmodified sample stack, rendered once per test session."""

    def get(stack: str) -> Plan:
        if stack not in _CACHE:
            _CACHE[stack] = render_plan(stack)
        return _CACHE[stack]

    return get


def inputs_of(plan: Plan, type_: str) -> list[dict[str, Any]]:
    return [r.inputs for r in plan.of_type(type_)]


BOOT_USER_DATA = {"aws:ec2/launchTemplate:LaunchTemplate": "userData", "aws:ec2/instance:Instance": "userDataBase64",
                  "tencentcloud:Instance/instance:Instance": "userData"}
"""Where a plan carries a machine's #cloud-config: the AWS nodes' launch template, an AWS instance's own
(the Slurm head node; the GPU nodes take the template's), each Tencent instance's own."""


def boot_document(r) -> str:
    """The #cloud-config machine (or launch template) `r` boots with, as cloud-init reads it."""
    from components.cloudinit import decode

    return decode(r.inputs[BOOT_USER_DATA[r.type]])


def boot_documents(plan: Plan) -> list[tuple[Any, str]]:
    """(resource, #cloud-config) of every boot document of `plan`, in plan order."""
    return [(r, boot_document(r)) for r in plan.of_type(*BOOT_USER_DATA)
            if r.type != "aws:ec2/instance:Instance" or r.inputs.get("userDataBase64")]


def gpu_nodes(plan: Plan, type_: str) -> list:
    """The GPU nodes among the instances of `type_`: all but the Slurm head node, which the stack tags
    gpu-cluster:role=head (components/headnode.py)."""
    from components.headnode import HEAD_ROLE, ROLE_TAG

    return [r for r in plan.of_type(type_) if (r.inputs.get("tags") or {}).get(ROLE_TAG) != HEAD_ROLE]


def head_node(plan: Plan, type_: str):
    """The one Slurm head node among the instances of `type_`."""
    from components.headnode import HEAD_ROLE, ROLE_TAG

    found = [r for r in plan.of_type(type_) if (r.inputs.get("tags") or {}).get(ROLE_TAG) == HEAD_ROLE]
    assert len(found) == 1, f"expected one head node, found {len(found)}"
    return found[0]


def slurm_boot_files(plan: Plan, r) -> dict[str, str]:
    """The files of node `r`'s Slurm boot kept in the boot bucket (components/slurm/bundle.py), which its user data
    fetches by key (Tencent); {} for a node whose user data carries them itself."""
    import re as _re

    from components.slurm.bundle import unpack

    m = _re.search(r" (slurm/\S+\.sh) ", boot_document(r))
    if m is None:
        return {}
    (obj,) = [o for o in plan.of_type("tencentcloud:Cos/bucketObject:BucketObject") if o.inputs.get("key") == m.group(1)]
    return unpack(obj.inputs["content"])


def node_files(plan: Plan, r) -> dict[str, str]:
    """Every file node `r` boots with: its #cloud-config's write_files and its Slurm boot's, by path."""
    doc = yaml.safe_load(boot_document(r).split("\n", 1)[1]) or {}
    return {**{f["path"]: f["content"] for f in doc.get("write_files", [])}, **slurm_boot_files(plan, r)}
