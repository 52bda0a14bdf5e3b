"""Reading the files users hand us: text first, then strict YAML or JSON.

Every failure is a `UserError` whose sentence names the file and what is wrong with it (missing, a
directory, binary, not UTF-8, not YAML, a key given twice...), never a traceback.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Optional

import yaml

from components.catalog import YAML_LOADER
from gpu_cluster.errors import UserError

MAX_DEPTH = 64
"""Deeper nesting than this is refused: no stack file, plan or export of ours comes near it, and a
recursive reader would otherwise crash on a hostile file."""

MAX_BYTES = 2 * 1024 ** 3
"""Larger plans and exports are refused before they are read (a 38,000-resource export is about 60 MB)."""

MAX_INPUT_BYTES = 4 * 1024 ** 2
"""Stack, workload, price and policy-config files larger than this (4 MiB) are refused before they are
read: the largest sample stack file is under 2 KB, the price example under 10 KB."""

MAX_YAML_NODES = 100_000
"""A YAML document whose aliases expand to more values than this is refused before it is built: a
"billion laughs" file of a kilobyte expands to billions (YAML 1.2, "Node Anchors" and "Alias Nodes": an
alias stands for the whole anchored node, and every reader after the parser sees each copy)."""

ROOT = Path(__file__).resolve().parent.parent


def _size(n: int) -> str:
    return f"{n // 1024 ** 3} GiB" if n >= 1024 ** 3 else f"{n // 1024 ** 2} MiB"


def read_text(path: Path, what: str, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of `path`; `what` names the kind of file in messages ("stack file", "plan")."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{what} {path} is a directory; give the path of a file")
    if path.exists() and not path.is_file():
        raise UserError(f"{what} {path} is not a regular file (a device, a pipe or a socket); give the path of a file")
    try:
        if path.stat().st_size > max_bytes:
            raise UserError(f"{what} {path} is larger than {_size(max_bytes)}; no {what} is that large")
        with open(path, "rb") as f:  # read at most the cap: a file may grow after the check
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise UserError(f"{what} {path} is larger than {_size(max_bytes)}; no {what} is that large")
    except FileNotFoundError:
        raise UserError(f"{what} {path} does not exist") from None
    except OSError as e:
        raise UserError(f"{what} {path} cannot be read: {e.strerror or e}") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UserError(f"{what} {path} is UTF-16 encoded; save it as UTF-8")
    if b"\x00" in data:
        raise UserError(f"{what} {path} is a binary file, not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None


class _StrictLoader(YAML_LOADER):  # type: ignore[misc,valid-type]
    """A safe loader that refuses a key given twice in one mapping (YAML says keys are unique)."""


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a plain value",
                                                    key_node.start_mark) from None
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice in the same mapping (line {key_node.start_mark.line + 1})",
                key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _no_tag(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None, None, f"the YAML tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is not allowed here; write the value "
                    f"plainly", node.start_mark)


# Types no stack, workload or price file has: a tag that asks for one is refused, not half-read.
for _kind in ("set", "timestamp", "binary", "omap", "pairs"):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_kind}", _no_tag)

# Plain scalars resolved as the YAML 1.2 core schema does — the schema of the Go YAML library the Pulumi
# CLI reads stack files with: only true/false are booleans (not yes/no/on/off), no timestamps (a date
# stays text for the field to parse), no base-60 numbers (21:00 is not 1260), and 14e9 is a number.
import re as _re  # noqa: E402

_StrictLoader.yaml_implicit_resolvers = {}
for _tag, _regexp, _first in (
        ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
        ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
        ("tag:yaml.org,2002:float",
         r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
         "-+0123456789."),
        ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
        ("tag:yaml.org,2002:merge", r"^(?:<<)$", "<"),
):
    _StrictLoader.add_implicit_resolver(_tag, _re.compile(_regexp), list(_first))


def _depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of containers, iteratively (no recursion limit), stopping past `limit`."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


_TOO_DEEP = object()
"""What a reader that hit Python's recursion limit returns: deeper than any `MAX_DEPTH`."""


def _shallow(doc: Any, where: str) -> Any:
    """`doc`, unless it nests deeper than `MAX_DEPTH` (then a sentence about `where`)."""
    if doc is _TOO_DEEP or _depth(doc) > MAX_DEPTH:
        raise UserError(f"{where} nests deeper than {MAX_DEPTH} levels")
    return doc


def _expanded_nodes(root: yaml.Node, cap: int) -> int:
    """How many nodes the document has once every alias is expanded, counting each anchored node once
    per reference; stops past `cap` (a node that contains itself counts as past it). Linear in the
    composed graph: each node's expanded size is computed once."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return list(node.value) if isinstance(node, yaml.SequenceNode) else []

    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            sizes[key] = min(cap + 1, 1 + sum(sizes[id(c)] for c in children(node)))
            in_progress.discard(key)
            if sizes[key] > cap:
                return sizes[key]
            continue
        if key in sizes:
            continue
        if key in in_progress:
            return cap + 1
        in_progress.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children(node) if id(c) not in sizes)
    return sizes[id(root)]


def load_yaml(path: Path, what: str, max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """The strict-YAML document of `path`: at most `max_bytes`, and at most MAX_YAML_NODES values once
    its aliases are expanded (both checked before anything is built from it)."""
    text = read_text(path, what, max_bytes)
    try:
        loader = _StrictLoader(text)
        try:
            node = loader.get_single_node()
            if node is not None and _expanded_nodes(node, MAX_YAML_NODES) > MAX_YAML_NODES:
                raise UserError(f"{what} {path} expands to more than {MAX_YAML_NODES:,} values through YAML aliases "
                                f"(*name); write the values out, or use fewer aliases")
            doc = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise UserError(f"{what} {path} is not valid YAML{where}: {problem}") from None
    except RecursionError:
        doc = _TOO_DEEP
    except ValueError:  # an integer longer than Python converts (4,300 digits)
        raise UserError(f"{what} {path} holds a number with thousands of digits; no setting takes one") from None
    return _shallow(doc, f"{what} {path}")


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def load_json(path: Path, what: str) -> Any:
    """The JSON document of `path`: NaN / Infinity and absurd nesting are refused."""
    text = read_text(path, what)
    return parse_json(text, f"{what} {path}")


def parse_json(text: str, where: str) -> Any:
    try:
        doc = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as e:
        raise UserError(f"{where} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except ValueError as e:
        raise UserError(f"{where} is not valid JSON: {e}") from None
    except RecursionError:
        doc = _TOO_DEEP
    return _shallow(doc, where)


def finite(value: Any) -> bool:
    """True unless `value` is a float that is NaN or infinite."""
    return not (isinstance(value, float) and not math.isfinite(value))


def output_dir(path: Path, what: str, create: bool = True) -> Path:
    """A folder to write into, created if need be (or, with create=False, one that can be: checked
    before the work that fills it); a sentence when it cannot be."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{what} {path} is a file; give a folder")
    if not create:
        parent = next((p for p in [path, *path.parents] if p.exists()), Path("."))
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise UserError(f"{what} {path} cannot be created: {parent} is not a folder this user may write in")
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{what} {path} cannot be created: {e.strerror or e}") from None
    return path


def _linked(path: Path) -> Optional[Path]:
    """The symbolic link a write to `path` would go through: the file itself, or, inside this checkout,
    a folder between the checkout and it (a pull request can commit a link as build/ or build/review.md;
    a folder outside the checkout is the user's own choice)."""
    path = Path(os.path.abspath(path))
    if path.is_symlink():
        return path
    try:
        inside = path.relative_to(ROOT)
    except ValueError:
        return None
    folder = ROOT
    for part in inside.parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            return folder
    return None


def output_file(path: Path, what: str) -> Path:
    """A file path to write, its folder created; a sentence when it is a folder, a symbolic link (or
    under one inside this checkout), or cannot be made."""
    path = Path(path)
    link = _linked(path)
    if link is not None:
        raise UserError(f"{what} {path}: {link} is a symbolic link; nothing is written through one: remove it or "
                        f"give another path")
    if path.is_dir():
        raise UserError(f"{what} {path} is a folder; give the path of a file")
    output_dir(path.parent, f"the folder of {what}")
    return path


def write_text(path: Path, text: str, what: str) -> None:
    """Write `text` to `path` (checked by output_file), never following a link put there meanwhile."""
    path = output_file(path, what)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise UserError(f"{what} {path} cannot be written: {e.strerror or e}") from None
