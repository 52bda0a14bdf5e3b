"""Reading the files users hand us: text first, then strict YAML or JSON.

Every failure is a `UserError` whose sentence names the file and what is wrong with it (missing, a
directory, binary, not UTF-8, not YAML, a key given twice...), never a traceback.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from gpu_cluster.errors import UserError

MAX_DEPTH = 64
"""Deeper nesting than this is refused: no stack file, plan or export of ours comes near it, and a
recursive reader would otherwise crash on a hostile file."""

# libyaml's loader when PyYAML was built with it (its wheels are).
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of `path`; `what` names the kind of file in messages ("stack file", "plan")."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{what} {path} is a directory; give the path of a file")
    try:
        data = path.read_bytes()
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


class _StrictLoader(_BASE_LOADER):  # type: ignore[misc,valid-type]
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


def load_yaml(path: Path, what: str) -> Any:
    """The strict-YAML document of `path`."""
    text = read_text(path, what)
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise UserError(f"{what} {path} is not valid YAML{where}: {problem}") from None
    except RecursionError:
        doc = _TOO_DEEP
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
