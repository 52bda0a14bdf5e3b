"""The policy pack on hand-built plan fragments: exact (policy, URN) sets per case (see policy_fixtures)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gpu_cluster.plan import Plan
from gpu_cluster.policyrun import POLICIES, run_policies
from policy_fixtures import BASELINES, FIXTURES, FORMS, INCOMPLETE, case_files, judged_violations, load

ENFORCEMENT = {p.name: p.enforcement_level.value for p in POLICIES}


def found(plan: Plan, config=None, **kw) -> set[tuple[str, str]]:
    return {(v.policy, v.urn) for v in run_policies(plan, config, **kw)}


judged = judged_violations  # test_an_estimate_with_unpriced_gpu_nodes_is_called_incomplete judges the one left out


@pytest.mark.parametrize("baseline", BASELINES)
def test_baselines_are_clean(baseline):
    plan = Plan.load(FIXTURES / baseline)
    assert judged(plan) == []


def test_an_estimate_with_unpriced_gpu_nodes_is_called_incomplete():
    """Within the budget only as far as it is priced: the advisory says the estimate is a lower bound and names
    what is unpriced; a fully priced estimate within the budget says nothing."""
    assert run_policies(Plan.load(FIXTURES / "aws-baseline.json")) == []
    [v] = run_policies(Plan.load(FIXTURES / "tencent-baseline.json"))
    assert (v.policy, v.enforcement) == ("budget-covers-estimate", "advisory")
    assert v.message.startswith(INCOMPLETE) and "GPU nodes 2 × HCCPNV6.96XLARGE2304" in v.message
    assert "whether budget" in v.message and "is unknown" in v.message


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("path", case_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_case(path, form):
    plan, config, expect = load(path, form)
    violations = judged(plan, config)
    assert {(v.policy, v.urn) for v in violations} == expect
    for v in violations:
        assert v.enforcement == ENFORCEMENT[v.policy]
        assert v.message.endswith(".") and len(v.message) > 40
        assert v.urn.rsplit("::", 1)[-1] in v.message or v.policy in ("no-spot-only-critical", "budget-covers-estimate"), \
            "a message names the resource it is about"


def test_messages_name_the_resource_and_the_fix():
    plan, config, _ = load(FIXTURES / "dedicated-subnet" / "fail-existing-subnet.json")
    [first, _second] = run_policies(plan, config)
    assert "'llm-node-0'" in first.message and "subnet-0feedfacecafe0001" in first.message
    assert "existing_subnet_id" in first.message


def test_estimate_from_an_injected_pricer():
    plan = Plan.load(FIXTURES / "aws-baseline.json")
    over = SimpleNamespace(total=120_000.0, currency="USD", unpriced=["p5e.48xlarge"])
    [v] = run_policies(plan, pricer=lambda p: over)
    assert (v.policy, v.enforcement) == ("budget-covers-estimate", "advisory")
    assert v.urn.endswith("::llm-budget") and "120,000 USD" in v.message and "1 item(s)" in v.message
    under = SimpleNamespace(total=10_000.0, currency="USD", unpriced=[])
    assert run_policies(plan, pricer=lambda p: under) == []
    # An estimate given in the policy config wins over the pricer.
    config = {"budget-covers-estimate": {"monthlyEstimate": {"total": 1.0, "currency": "USD"}}}
    assert run_policies(plan, config, pricer=lambda p: over) == []


def test_unknown_values_never_crash_a_rule():
    """Preview: every input unknown (the engine's sentinels) — no crash, no "can't run" diagnostic."""
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

    def unknown(v):
        if isinstance(v, dict):
            return {k: unknown(x) for k, x in v.items()}
        if isinstance(v, list):
            return [unknown(x) for x in v]
        return UNKNOWN_STRING_VALUE

    for baseline in BASELINES:
        doc = json.loads((FIXTURES / baseline).read_text())
        for r in doc["deployment"]["resources"]:
            r["inputs"] = unknown(r.get("inputs", {}))
        assert judged(Plan.from_doc(doc)) == []
        for r in doc["deployment"]["resources"]:
            r["inputs"] = {k: UNKNOWN_STRING_VALUE for k in r["inputs"]}
        assert judged(Plan.from_doc(doc)) == []


def test_missing_values_never_crash_a_rule():
    for baseline in BASELINES:
        doc = json.loads((FIXTURES / baseline).read_text())
        for r in doc["deployment"]["resources"]:
            r["inputs"] = {}
            r.pop("id", None)
        violations = run_policies(Plan.from_doc(doc))
        assert all(not v.message.startswith("can't run") for v in violations)


def test_preview_resolves_unknown_ids_through_dependencies():
    """A new subnet's id is unknown during preview; the node's dependency on it still proves it is ours."""
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

    doc = json.loads((FIXTURES / "tencent-baseline.json").read_text())
    subnet = next(r for r in doc["deployment"]["resources"] if r["urn"].endswith("::tcl-subnet"))
    for r in doc["deployment"]["resources"]:
        if r["urn"].endswith(("::tcl-node-0", "::tcl-node-1")):
            r["inputs"]["subnetId"] = UNKNOWN_STRING_VALUE
            r["dependencies"] = [subnet["urn"]]
    subnet.pop("id")
    assert judged(Plan.from_doc(doc)) == []
