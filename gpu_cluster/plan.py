"""Read a plan file or a `pulumi stack export` (version 3) into typed resources.

One reader for every consumer (policy runner, pricer, review, tests), so each sees the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from gpu_cluster.errors import UserError
from gpu_cluster.files import load_json


def number(value: Any) -> Optional[float]:
    """A property as a number (engines send floats, exports may hold strings); None when it is not one."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class PlanFormatError(UserError):
    """A file that is not a version-3 stack export."""


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


@dataclass
class Plan:
    resources: list[Resource]
    path: Optional[Path] = None

    @classmethod
    def from_doc(cls, doc: Any, path: Optional[Path] = None) -> "Plan":
        where = str(path) if path else "plan"
        if not isinstance(doc, dict) or doc.get("version") != 3:
            raise PlanFormatError(f"{where}: not a Pulumi stack export: expected {{\"version\": 3, \"deployment\": ...}}")
        raw = (doc.get("deployment") or {}).get("resources")
        if raw is None:
            raw = []
        if not isinstance(raw, list):
            raise PlanFormatError(f"{where}: deployment.resources must be a list")
        resources = []
        for i, r in enumerate(raw):
            if not isinstance(r, dict) or "urn" not in r or "type" not in r:
                raise PlanFormatError(f"{where}: deployment.resources[{i}] has no urn/type")
            resources.append(Resource(
                urn=r["urn"], type=r["type"], custom=bool(r.get("custom", False)),
                inputs=r.get("inputs") or {}, outputs=r.get("outputs") or {},
                parent=r.get("parent") or "", protect=bool(r.get("protect", False)),
                dependencies=tuple(r.get("dependencies") or ()), provider=r.get("provider") or "",
                id=r.get("id") or "",
            ))
        return cls(resources=resources, path=path)

    @classmethod
    def load(cls, path: Path) -> "Plan":
        path = Path(path)
        try:
            doc = load_json(path, "plan file")
        except UserError as e:
            raise PlanFormatError(str(e)) from None
        return cls.from_doc(doc, path)

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
