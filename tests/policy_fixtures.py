"""Hand-built plan fragments for the policy tests (tests/fixtures/policies/).

Two compliant baselines — `aws-baseline.json` (a 2 × p4d critical cluster) and
`tencent-baseline.json` (2 × HCCPNV6 in an HPC cluster) — are full stack exports. Each case file
under `<policy>/` names a baseline and changes it, compliance-policies style:

    {"base": "aws-baseline.json", "description": "...",
     "set":    {"<resource name>": {"inputs.a.b.0.c": value, "protect": false}},
     "unset":  {"<resource name>": ["inputs.tags.some-key"]},
     "remove": ["<resource name>"],
     "add":    [{"type": ..., "name": ..., "id": ..., "inputs": {...}, "protect": false,
                 "parent": "<name>", "dependencies": ["<name>"], "propertyDependencies": {"<key>": ["<name>"]}}],
     "config": {<policy config, Pulumi's format>},
     "expect": [["<policy>", "<resource name>"], ...]}

`expect` is the exact set of (policy, resource) violations of the whole pack on the result. The string
"$unknown" anywhere in a value stands for the engine's unknown-value sentinel (a computed output during
preview).

Every case is judged in two forms (`forms`): as written, with resolved ids, and as a first
`pulumi preview` would send it (`preview_form`): no resource of the stack has an id yet, so every
reference to one — an id another resource names in its inputs — is unknown, and the engine records
where it came from in `propertyDependencies` and `dependencies`. The verdicts must be the same, except
where a case says otherwise in `"preview_expect"` (only for a value that is unknown as a whole in a preview,
such as a rule string built from an id, where nothing can be judged until the update).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any, Optional

from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from gpu_cluster.plan import Plan

UNKNOWN = "$unknown"

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


def copied(doc: Any) -> Any:
    """A deep copy of a JSON-shaped document: pickle's C round trip, several times faster than
    copy.deepcopy on a rendered plan (which the mutation and preview-form tests copy hundreds of times)."""
    return pickle.loads(pickle.dumps(doc, pickle.HIGHEST_PROTOCOL))


_SAMPLE_DOCS: dict[str, bytes] = {}


def sample_doc(stack: str) -> dict:
    """A copy of the stack export of an unmodified sample stack, for a test to change; rendered once."""
    if stack not in _SAMPLE_DOCS:
        from conftest import rendered, stack_with

        _SAMPLE_DOCS[stack] = pickle.dumps(rendered(stack_with(stack)).plan(), pickle.HIGHEST_PROTOCOL)
    return pickle.loads(_SAMPLE_DOCS[stack])


def _unknowns(value: Any) -> Any:
    if value == UNKNOWN:
        return UNKNOWN_STRING_VALUE
    if isinstance(value, dict):
        return {k: _unknowns(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unknowns(v) for v in value]
    return value


def build(case: dict) -> dict:
    """The stack export a case describes."""
    doc = json.loads((FIXTURES / case["base"]).read_text())
    resources: list[dict] = doc["deployment"]["resources"]
    stack_urn = resources[0]["urn"]
    provider = next(r for r in resources if r["type"].startswith("pulumi:providers:"))
    prefix = stack_urn.split("::pulumi:pulumi:Stack::")[0]
    removed = set(case.get("remove", []))
    resources[:] = [r for r in resources if _name(r["urn"]) not in removed]
    added = []
    for add in case.get("add", []):
        res = {
            "urn": f"{prefix}::{add['type']}::{add['name']}", "custom": True, "type": add["type"],
            "id": add.get("id", add["name"]), "inputs": _unknowns(add.get("inputs", {})),
            "outputs": {}, "parent": stack_urn, "protect": add.get("protect", False),
        }
        if not add["type"].startswith("pulumi:providers:"):
            # the default provider of its package, or the provider resource the case names
            provider = next(r for r in resources if (_name(r["urn"]) == add["provider"] if "provider" in add else
                                                     r["type"] == f"pulumi:providers:{add['type'].split(':', 1)[0]}"))
            res["provider"] = f"{provider['urn']}::{provider['id']}"
        if add.get("external"):
            res["external"] = True  # read with `.get()`
        resources.append(res)
        added.append((res, add))
    by_name = {_name(r["urn"]): r for r in resources}
    urn_of = lambda n: n if n.startswith("urn:") else by_name[n]["urn"]  # noqa: E731
    for res, add in added:
        res["dependencies"] = [urn_of(n) for n in add.get("dependencies", [])]
        if "parent" in add:
            res["parent"] = urn_of(add["parent"])
        if "propertyDependencies" in add:
            res["propertyDependencies"] = {k: [urn_of(n) for n in v] for k, v in add["propertyDependencies"].items()}
    for name, paths in case.get("unset", {}).items():
        for path in paths:
            obj, key = _walk(by_name[name], path.split("."), create=False)
            if obj is not None and key in obj:
                del obj[key]
    for name, changes in case.get("set", {}).items():
        for path, value in changes.items():
            obj, key = _walk(by_name[name], path.split("."), create=True)
            obj[key] = _unknowns(value)
    return doc


def preview_form(doc: dict) -> dict:
    """`doc` as a first preview sends it: ids of created resources unknown, references to them recorded as
    (property) dependencies."""
    doc = copied(doc)
    resources = doc["deployment"]["resources"]
    by_id: dict[str, dict] = {}
    for r in resources:
        if r.get("custom") and r.get("id") and not r["type"].startswith("pulumi:providers:") and not r.get("external"):
            rid = r["id"]
            # Several resources may share an id (an S3 bucket and its configuration resources): the reference
            # is to the one the others depend on.
            if rid not in by_id or r["urn"] in by_id[rid].get("dependencies", []):
                by_id[rid] = r

    def unknown(value: Any, me: dict, deps: set[str]) -> Any:
        if isinstance(value, str):
            # An id, or a string built from one (Tencent "ACTION#ipm-xxx#port#proto" rules), is unknown as a whole.
            refs = {value} if value in by_id else set(value.split("#")) & by_id.keys()
            refs = {v for v in refs if by_id[v] is not me}
            if refs:
                deps.update(by_id[v]["urn"] for v in refs)
                return UNKNOWN_STRING_VALUE
        if isinstance(value, dict):
            return {k: unknown(v, me, deps) for k, v in value.items()}
        if isinstance(value, list):
            return [unknown(v, me, deps) for v in value]
        return value

    for r in resources:
        pdeps = {k: list(v) for k, v in (r.get("propertyDependencies") or {}).items()}
        for part in ("inputs", "outputs"):
            props = r.get(part) or {}
            for key in list(props):
                deps: set[str] = set()
                props[key] = unknown(props[key], r, deps)
                if deps:
                    # The ids the value holds now are what it depends on (a mutation may have changed it).
                    pdeps[key] = sorted(deps)
        if pdeps:
            r["propertyDependencies"] = pdeps
            r["dependencies"] = sorted(set(r.get("dependencies") or []) | {u for v in pdeps.values() for u in v})
    for r in resources:
        # A resource read with `.get()` is read during the preview too: its id is known.
        if r.get("custom") and not r["type"].startswith("pulumi:providers:") and not r.get("external"):
            r.pop("id", None)
    return doc


FORMS = ("resolved", "preview")


def load(path: Path, form: str = "resolved") -> tuple[Plan, Optional[dict], set[tuple[str, str]]]:
    """(plan, policy config, expected {(policy, urn)}) of a case file, in one of `FORMS`."""
    case = json.loads(path.read_text())
    doc = build(case)
    if form == "preview":
        doc = preview_form(doc)
    urns = {_name(r["urn"]): r["urn"] for r in doc["deployment"]["resources"]}
    wanted = case.get("preview_expect", case["expect"]) if form == "preview" else case["expect"]
    expect = {(policy, urns[name]) for policy, name in wanted}
    return Plan.from_doc(doc, path), case.get("config"), expect


def case_files() -> list[Path]:
    return sorted(p for p in FIXTURES.glob("*/*.json") if p.parent.name != "acceptance")


INCOMPLETE = "The estimated monthly cost is incomplete"
"""budget-covers-estimate's advisory that the estimate leaves unpriced items out: every Tencent plan here has the
sample's unpriced HCC GPU nodes (tests/test_policies.py judges that advisory on its own)."""


def judged_violations(plan, config=None) -> list:
    """run_policies less the incomplete-estimate advisory, for tests about the other rules."""
    from gpu_cluster.policyrun import run_policies

    return [v for v in run_policies(plan, config) if not v.message.startswith(INCOMPLETE)]
