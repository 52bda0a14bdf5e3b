"""Read a plan file, a `pulumi stack export` or a DIY-backend state file into typed resources.

One reader for every consumer (policy runner, pricer, review, tests), so each sees the same thing.
Accepted shapes (Pulumi's `apitype` package: `UntypedDeployment`, `VersionedCheckpoint`):

- `pulumi stack export`: `{"version": 3 | 4, "deployment": {"manifest": ..., "resources": [...]}}`;
- a DIY-backend (file, S3, GCS, Azure blob) state file `.pulumi/stacks/<project>/<stack>.json`:
  `{"version": 3 | 4, "checkpoint": {"stack": ..., "latest": {"manifest": ..., "resources": [...]}}}`.

Version 4 has the same resource shape as 3 (the engine writes 4 only when a newer feature needs it).
Resources marked `"delete": true` are pending deletion (left over from a failed replacement): they are
skipped, as the engine skips them when it builds the next snapshot. Anything else malformed is a
`PlanFormatError` (a `UserError`: one sentence, exit status 2), never a traceback.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from components.messages import kind_of
from gpu_cluster.errors import UserError
from gpu_cluster.files import read_text

SUPPORTED_VERSIONS = (3, 4)
MAX_DEPTH = 64
"""Deepest nesting accepted inside one resource's properties (no provider schema comes near it)."""


def number(value: Any) -> Optional[float]:
    """A property as a number (engines send floats, exports may hold strings); None when it is not one."""
    try:
        n = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return n if math.isfinite(n) else None


class PlanFormatError(UserError):
    """A file that is not a readable stack export, plan or state file."""


@dataclass(frozen=True)
class Resource:
    urn: str
    type: str
    custom: bool
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    parent: str = ""
    protect: bool = False
    dependencies: tuple[str, ...] = ()
    provider: str = ""
    id: str = ""
    property_dependencies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    external: bool = False  # read with `.get()`: the stack refers to it but did not create it
    retain_on_delete: bool = False  # left in the cloud when it leaves the state (`retainOnDelete` in an export)

    @property
    def name(self) -> str:
        """The logical name (last URN segment)."""
        return self.urn.rsplit("::", 1)[-1]

    @property
    def props(self) -> dict[str, Any]:
        """Inputs, completed by outputs for what only the provider computes (a real export has both)."""
        return {**self.outputs, **self.inputs} if self.inputs else dict(self.outputs)

    @property
    def tags(self) -> dict[str, str]:
        tags = self.props.get("tags") or {}
        return tags if isinstance(tags, dict) else {}


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large to be a finite number")
    return value


def parse_export(text: str, where: str) -> Any:
    """JSON text → document: NaN, Infinity and overflowing numbers refused, absurd nesting refused."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise PlanFormatError(f"{where} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except ValueError as e:
        raise PlanFormatError(f"{where} is not valid JSON: {e}") from None
    except RecursionError:
        raise PlanFormatError(f"{where} nests deeper than any stack export can") from None


_SCALARS = (str, int, bool, type(None))


def check_value(value: Any, where: str, depth: int = 0) -> None:
    """Refuse what no engine produces: non-finite numbers, non-JSON values, nesting past MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise PlanFormatError(f"{where} nests deeper than {MAX_DEPTH} levels")
    t = type(value)
    if t is dict:
        values: Any = value.values()
    elif t is list:
        values = value
    else:
        if t is float and not math.isfinite(value):
            raise PlanFormatError(f"{where} holds {value}, not a finite number")
        if t is not float and t not in _SCALARS:
            raise PlanFormatError(f"{where} holds a {t.__name__}, not a JSON value")
        return
    for v in values:
        t = type(v)
        if t is dict or t is list:
            check_value(v, where, depth + 1)
        elif t is float:
            if not math.isfinite(v):
                raise PlanFormatError(f"{where} holds {v}, not a finite number")
        elif t not in _SCALARS:
            raise PlanFormatError(f"{where} holds a {t.__name__}, not a JSON value")


def _resources_of(doc: Any, where: str) -> list:
    if not isinstance(doc, dict):
        raise PlanFormatError(f"{where} is not a Pulumi stack export: expected a JSON object with \"version\" and "
                              f"\"deployment\" (pulumi stack export) or \"checkpoint\" (a DIY-backend state file), "
                              f"got {kind_of(doc)}")
    version = doc.get("version")
    if "deployment" not in doc and "checkpoint" not in doc:
        raise PlanFormatError(f"{where} is not a Pulumi stack export: it has neither \"deployment\" "
                              f"(pulumi stack export) nor \"checkpoint\" (a DIY-backend state file)")
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        raise PlanFormatError(f"{where} has \"version\": {json.dumps(version)[:40]}; this reader understands stack "
                              f"export / checkpoint versions 3 and 4 (Pulumi CLI 2.x and later)")
    if "deployment" in doc:
        body, label = doc["deployment"], "deployment"
    else:
        checkpoint = doc["checkpoint"]
        if not isinstance(checkpoint, dict):
            raise PlanFormatError(f"{where}: \"checkpoint\" must be an object, got {_kind(checkpoint)}")
        body, label = checkpoint.get("latest"), "checkpoint.latest"
        if body is None:
            return []  # a stack that was created but never deployed
    if not isinstance(body, dict):
        raise PlanFormatError(f"{where}: \"{label}\" must be an object, got {_kind(body)}")
    raw = body.get("resources")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise PlanFormatError(f"{where}: {label}.resources must be a list, got {_kind(raw)}")
    return raw


def _kind(value: Any) -> str:
    return "null" if value is None else {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number")


def _str_list(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PlanFormatError(f"{what} must be a list of URNs, got {json.dumps(value)[:60]}")
    return tuple(value)


def _resource(r: Any, where: str, i: int) -> Optional[Resource]:
    at = f"{where}: resource {i}"
    if not isinstance(r, dict):
        raise PlanFormatError(f"{at} must be an object, got {_kind(r)}")
    urn, type_ = r.get("urn"), r.get("type")
    if not isinstance(urn, str) or not urn.startswith("urn:pulumi:") or urn.count("::") < 3:
        raise PlanFormatError(f"{at} has urn {json.dumps(urn)[:80]}; a Pulumi URN looks like "
                              f"urn:pulumi:<stack>::<project>::<type>::<name>")
    at = f"{where}: resource {urn}"
    if not isinstance(type_, str) or not type_:
        raise PlanFormatError(f"{at} has type {json.dumps(type_)[:60]}; expected a type token such as "
                              f"aws:ec2/instance:Instance")
    if r.get("delete") is True:
        return None  # pending deletion: no longer part of the stack
    fields: dict[str, Any] = {}
    for key in ("inputs", "outputs"):
        value = r.get(key)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise PlanFormatError(f"{at}: {key} must be an object, got {_kind(value)}")
        check_value(value, f"{at}: {key}")
        fields[key] = value
    for key in ("parent", "provider", "id"):
        value = r.get(key)
        if value is not None and not isinstance(value, str):
            raise PlanFormatError(f"{at}: {key} must be a string, got {_kind(value)}")
        fields[key] = value or ""
    for key, name in (("custom", "custom"), ("protect", "protect"), ("external", "external"),
                      ("retainOnDelete", "retain_on_delete")):
        value = r.get(key, False)
        if value is not None and not isinstance(value, bool):
            raise PlanFormatError(f"{at}: {key} must be true or false, got {json.dumps(value)[:40]}")
        fields[name] = bool(value)
    deps = _str_list(r.get("dependencies"), f"{at}: dependencies")
    raw_pd = r.get("propertyDependencies")
    prop_deps: dict[str, tuple[str, ...]] = {}
    if raw_pd is not None:
        if not isinstance(raw_pd, dict):
            raise PlanFormatError(f"{at}: propertyDependencies must be an object, got {_kind(raw_pd)}")
        for k, v in raw_pd.items():
            prop_deps[k] = _str_list(v, f"{at}: propertyDependencies.{k}")
    return Resource(urn=urn, type=type_, dependencies=deps, property_dependencies=prop_deps, **fields)


@dataclass
class Plan:
    resources: list[Resource]
    path: Optional[Path] = None
    skipped: int = 0
    """Resources left out because they were pending deletion."""

    @classmethod
    def from_doc(cls, doc: Any, path: Optional[Path] = None) -> "Plan":
        where = str(path) if path else "plan"
        resources, skipped, seen = [], 0, set()
        for i, raw in enumerate(_resources_of(doc, where)):
            res = _resource(raw, where, i)
            if res is None:
                skipped += 1
                continue
            if res.urn in seen:
                raise PlanFormatError(f"{where}: resource {res.urn} appears twice")
            seen.add(res.urn)
            resources.append(res)
        return cls(resources=resources, path=path, skipped=skipped)

    @classmethod
    def load(cls, path: Path) -> "Plan":
        path = Path(path)
        try:
            text = read_text(path, "plan file")
        except UserError as e:
            raise PlanFormatError(str(e)) from None
        return cls.from_doc(parse_export(text, f"plan file {path}"), path)

    def __iter__(self) -> Iterator[Resource]:
        return iter(self.resources)

    def of_type(self, *types: str) -> list[Resource]:
        return [r for r in self.resources if r.type in types]

    def by_urn(self) -> dict[str, Resource]:
        return {r.urn: r for r in self.resources}

    def one(self, type_: str) -> Resource:
        found = self.of_type(type_)
        if len(found) != 1:
            raise AssertionError(f"expected one {type_}, found {len(found)}")
        return found[0]

    @property
    def stack(self) -> Optional[Resource]:
        found = self.of_type("pulumi:pulumi:Stack")
        return found[0] if found else None

    @property
    def stack_name(self) -> str:
        first = self.resources[0].urn if self.resources else ""
        return first.split("::")[0].removeprefix("urn:pulumi:") if first else ""

    def custom(self) -> Iterable[Resource]:
        return (r for r in self.resources if r.custom and not r.type.startswith("pulumi:providers:"))
