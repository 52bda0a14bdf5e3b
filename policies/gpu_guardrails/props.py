"""Defensive reading of engine properties (camelCase, possibly unknown during preview).

The analyzer hands a policy its properties wrapped in the SDK's unknown-checking proxy: reading a
value that is not known yet raises `UnknownValueError`, and numbers arrive as floats (they travel as
protobuf `Struct` values). Rules read through `get` so that a missing or unknown value is a value
(`None` or `UNKNOWN`), never a crash or a "can't run during preview" diagnostic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Iterable, Optional

from pulumi_policy.proxy import (UNKNOWN_ARCHIVE_VALUE, UNKNOWN_ARRAY_VALUE, UNKNOWN_ASSET_VALUE,
                                 UNKNOWN_BOOLEAN_VALUE, UNKNOWN_NUMBER_VALUE, UNKNOWN_OBJECT_VALUE,
                                 UNKNOWN_STRING_VALUE, UnknownValueError)

# The engine's sentinels for values not known until the update (pulumi_policy.proxy, public names).
_SENTINELS = frozenset({UNKNOWN_ARCHIVE_VALUE, UNKNOWN_ARRAY_VALUE, UNKNOWN_ASSET_VALUE, UNKNOWN_BOOLEAN_VALUE,
                        UNKNOWN_NUMBER_VALUE, UNKNOWN_OBJECT_VALUE, UNKNOWN_STRING_VALUE})


def _is_unknown(o: Any) -> bool:
    return type(o) is str and o in _SENTINELS


class _Unknown:
    """A value the engine will only know after the update (an output of a resource not yet created)."""

    _instance: Optional["_Unknown"] = None

    def __new__(cls) -> "_Unknown":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unknown>"

    def __bool__(self) -> bool:
        return False


UNKNOWN = _Unknown()

CLUSTER_TAG = "gpu-cluster:name"
TIER_TAG = "gpu-cluster:tier"
CRITICALITY_TAG = "gpu-cluster:criticality"
ROLE_TAG = "gpu-cluster:role"
TAG_PREFIX = "gpu-cluster:"


_PATHS: dict[str, tuple[str, ...]] = {}
_MISSING = object()


def get(obj: Any, path: str | Iterable[Any] = (), default: Any = None) -> Any:
    """`obj` at `path` ("a.b.0.c" or a sequence of keys): the value, `UNKNOWN`, or `default` if absent.

    Works on plain values (unknowns as the engine's sentinel strings) and on the SDK's unknown-checking
    proxies (unknowns raise `UnknownValueError`) alike."""
    if isinstance(path, str):
        keys = _PATHS.get(path)
        if keys is None:
            keys = _PATHS[path] = tuple(path.split(".")) if path else ()
    else:
        keys = tuple(path)
    cur = obj
    try:
        if type(cur) is str and cur in _SENTINELS:
            return UNKNOWN
        for key in keys:
            if cur is None or cur is UNKNOWN:
                return default if cur is None else UNKNOWN
            t = type(cur)
            if t is dict:
                cur = cur.get(key, _MISSING)
                if cur is _MISSING:
                    return default
            elif t is list:
                idx = int(key)
                if not -len(cur) <= idx < len(cur):
                    return default
                cur = cur[idx]
            elif isinstance(cur, Mapping):
                if key not in cur:
                    return default
                cur = cur[key]
            elif isinstance(cur, Sequence) and not isinstance(cur, (str, bytes)):
                idx = int(key)
                if not -len(cur) <= idx < len(cur):
                    return default
                cur = cur[idx]
            else:
                return default
            if type(cur) is str and cur in _SENTINELS:
                return UNKNOWN
    except UnknownValueError:
        return UNKNOWN
    except (ValueError, TypeError, KeyError, IndexError):
        return default
    return default if cur is None else cur


_SEGMENTS: dict[str, tuple[tuple[str, bool], ...]] = {}


def values(obj: Any, path: str) -> list[Any]:
    """Every value at a table path ("a.b[].c": `[]` walks a list): known values and `UNKNOWN`, missing ones
    dropped. A single value where the path expects a list counts as a list of one."""
    segments = _SEGMENTS.get(path)
    if segments is None:
        segments = _SEGMENTS[path] = tuple((s[:-2], True) if s.endswith("[]") else (s, False)
                                           for s in path.split("."))
    current = [obj]
    for key, is_list in segments:
        found: list[Any] = []
        for c in current:
            v = get(c, (key,))
            if v is None:
                continue
            if is_list and v is not UNKNOWN and not isinstance(v, (str, bytes, Mapping)):
                found.extend(x for x in items(v) if x is not None)
            else:
                found.append(v)
        current = found
        if not current:
            break
    return current


def known(value: Any) -> bool:
    return value is not None and value is not UNKNOWN


def items(value: Any) -> list[Any]:
    """The elements of a list property; [] when missing, unknown or not a list (elements may be UNKNOWN)."""
    if not known(value) or isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        return []
    return [get(value, (i,)) for i in range(len(value))]


def as_str(value: Any) -> Optional[str]:
    return value if isinstance(value, str) and not _is_unknown(value) else None


def as_number(value: Any) -> Optional[float]:
    """Numbers come as floats from the engine and as strings from some providers ("100.5")."""
    if isinstance(value, bool) or not known(value):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def as_int(value: Any) -> Optional[int]:
    n = as_number(value)
    return int(n) if n is not None else None


def as_bool(value: Any) -> Optional[bool]:
    """True/False, also from the strings "true"/"false" some AWS launch-template fields use."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _tag_key(key: str) -> str:
    """This pack's own tag keys are matched case-insensitively (`GPU-Cluster:Name` is `gpu-cluster:name`)."""
    return key.lower() if key[:len(TAG_PREFIX)].lower() == TAG_PREFIX else key


def tags_of(props: Any, path: str = "tags") -> dict[str, str]:
    """Tags as a dict: a map at `path`, or a list of {key, value} (an autoscaling group's, CloudFormation's)."""
    raw = get(props, path)
    out: dict[str, str] = {}
    if isinstance(raw, Mapping):
        for k in list(raw):
            v = get(raw, (k,))
            if isinstance(v, str):
                out[_tag_key(str(k))] = v
    else:
        for tag in items(raw):
            k, v = as_str(get(tag, "key")), as_str(get(tag, "value"))
            if k is not None and v is not None:
                out[_tag_key(k)] = v
    return out


def tags_at(props: Any, path: str) -> dict[str, str]:
    """Tags at a table path: a map (`tags`), a list of {key, value} (`tags[]`), or lists inside objects
    (`tags[].tags[]`, a TKE native node pool's per-resource-type tags)."""
    if "[]" not in path:
        return tags_of(props, path)
    out: dict[str, str] = {}
    for tag in values(props, path):
        k, v = as_str(get(tag, "key")), as_str(get(tag, "value"))
        if k is not None and v is not None:
            out.setdefault(_tag_key(k), v)
    return out


def short(urn: str) -> str:
    """The logical name of a URN (its last segment)."""
    return urn.rsplit("::", 1)[-1] if urn else "the stack"
