"""Hand-built plan fragments for the policy tests (tests/fixtures/policies/).

Two compliant baselines — `aws-baseline.json` (a 2 × p4d critical cluster) and
`tencent-baseline.json` (2 × HCCPNV6 in an HPC cluster) — are full stack exports. Each case file
under `<policy>/` names a baseline and changes it, compliance-policies style:

    {"base": "aws-baseline.json", "description": "...",
     "set":    {"<resource name>": {"inputs.a.b.0.c": value, "protect": false}},
     "unset":  {"<resource name>": ["inputs.tags.some-key"]},
     "remove": ["<resource name>"],
     "add":    [{"type": ..., "name": ..., "id": ..., "inputs": {...}, "protect": false}],
     "config": {<policy config, Pulumi's format>},
     "expect": [["<policy>", "<resource name>"], ...]}

`expect` is the exact set of (policy, resource) violations of the whole pack on the result.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Optional

from gpu_cluster.plan import Plan

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "policies"
BASELINES = ("aws-baseline.json", "tencent-baseline.json")


def _name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def _walk(obj: Any, keys: list[str], create: bool) -> tuple[Any, Any]:
    for key in keys[:-1]:
        idx: Any = int(key) if isinstance(obj, list) else key
        if isinstance(obj, dict) and key not in obj:
            if not create:
                return None, None
            obj[key] = {}
        obj = obj[idx]
    last = keys[-1]
    return obj, (int(last) if isinstance(obj, list) else last)


def build(case: dict) -> dict:
    """The stack export a case describes."""
    doc = copy.deepcopy(json.loads((FIXTURES / case["base"]).read_text()))
    resources: list[dict] = doc["deployment"]["resources"]
    stack_urn = resources[0]["urn"]
    provider = next(r for r in resources if r["type"].startswith("pulumi:providers:"))
    prefix = stack_urn.split("::pulumi:pulumi:Stack::")[0]
    removed = set(case.get("remove", []))
    resources[:] = [r for r in resources if _name(r["urn"]) not in removed]
    for add in case.get("add", []):
        resources.append({
            "urn": f"{prefix}::{add['type']}::{add['name']}", "custom": True, "type": add["type"],
            "id": add.get("id", add["name"]), "inputs": copy.deepcopy(add.get("inputs", {})), "outputs": {},
            "parent": stack_urn, "protect": add.get("protect", False), "dependencies": add.get("dependencies", []),
            "provider": f"{provider['urn']}::{provider['id']}",
        })
    by_name = {_name(r["urn"]): r for r in resources}
    for name, paths in case.get("unset", {}).items():
        for path in paths:
            obj, key = _walk(by_name[name], path.split("."), create=False)
            if obj is not None and key in obj:
                del obj[key]
    for name, changes in case.get("set", {}).items():
        for path, value in changes.items():
            obj, key = _walk(by_name[name], path.split("."), create=True)
            obj[key] = copy.deepcopy(value)
    return doc


def load(path: Path) -> tuple[Plan, Optional[dict], set[tuple[str, str]]]:
    """(plan, policy config, expected {(policy, urn)}) of a case file."""
    case = json.loads(path.read_text())
    doc = build(case)
    urns = {_name(r["urn"]): r["urn"] for r in doc["deployment"]["resources"]}
    expect = {(policy, urns[name]) for policy, name in case["expect"]}
    return Plan.from_doc(doc, path), case.get("config"), expect


def case_files() -> list[Path]:
    return sorted(p for p in FIXTURES.glob("*/*.json") if p.parent.name != "acceptance")
