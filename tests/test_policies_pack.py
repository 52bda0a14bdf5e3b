"""The pack as a whole (metadata, fixtures per rule) and the offline runner (config, enforcement, CLI)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy, StackValidationPolicy

from gpu_cluster.cli import main
from gpu_cluster.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATION, UserError
from gpu_cluster.plan import Plan
from gpu_cluster.policyrun import POLICIES, Violation, format_violations, load_policy_config, run_policies
from policy_fixtures import FIXTURES, case_files

ROOT = Path(__file__).resolve().parent.parent
# The contract: the policy names (stack files, policy groups and CI configs refer to them), and the one
# advisory policy.
CONTRACT_NAMES = {
    "dedicated-subnet", "no-spot-only-critical", "single-zone", "placement-required", "rdma-enabled",
    "snapshot-schedule", "budget-alarm", "budget-covers-estimate", "no-public-ssh", "imdsv2-required",
    "storage-encrypted", "checkpoint-bucket-private", "stateful-protected", "no-public-ip",
}
ADVISORY = {"budget-covers-estimate"}
# Rules that relate resources to each other (a node to its subnet, a rule to its security group, a disk to
# the stack's encryption-by-default) must see the whole stack.
STACK_POLICIES = {"dedicated-subnet", "no-spot-only-critical", "single-zone", "budget-alarm", "no-public-ip",
                  "no-public-ssh", "storage-encrypted", "checkpoint-bucket-private", "snapshot-schedule"}


def test_names_are_unique_and_the_contract_names():
    names = [p.name for p in POLICIES]
    assert len(names) == len(set(names)) == 14
    assert set(names) == CONTRACT_NAMES


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_metadata(policy):
    assert isinstance(policy, (ResourceValidationPolicy, StackValidationPolicy))
    assert policy.description[0].isupper() and policy.description.endswith(".") and ". " not in policy.description
    assert policy.enforcement_level == (EnforcementLevel.ADVISORY if policy.name in ADVISORY else EnforcementLevel.MANDATORY)
    assert isinstance(policy.config_schema, PolicyConfigSchema) and policy.config_schema.properties
    for prop, schema in policy.config_schema.properties.items():
        assert schema.get("type") and schema.get("description"), f"{policy.name}.{prop} is typed and described"
    assert policy.remediation_steps
    if policy.name in STACK_POLICIES:
        assert isinstance(policy, StackValidationPolicy)


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_every_policy_has_compliant_and_violating_fixtures(policy):
    cases = [json.loads(p.read_text()) for p in case_files() if p.parent.name == policy.name]
    assert any(any(e[0] == policy.name for e in c["expect"]) for c in cases), "a violating fixture"
    assert any(all(e[0] != policy.name for e in c["expect"]) for c in cases), "a compliant fixture"
    assert all(c.get("description") for c in cases)


def test_fixture_directories_are_policies():
    assert {p.parent.name for p in case_files()} == CONTRACT_NAMES


def test_pack_main_assembles_the_same_policies():
    main = (ROOT / "policies" / "__main__.py").read_text()
    assert "PolicyPack(" in main and "ALL_POLICIES" in main and 'name=PACK_NAME' in main
    yaml_text = (ROOT / "policies" / "PulumiPolicy.yaml").read_text()
    assert "name: python" in yaml_text and "version:" in yaml_text and "description:" in yaml_text
    assert "pulumi-policy" in (ROOT / "policies" / "requirements.txt").read_text()


def test_docs_describe_every_policy():
    doc = (ROOT / "docs" / "policies.md").read_text()
    for name in CONTRACT_NAMES:
        assert f"`{name}`" in doc


# ---- runner: config and enforcement ----------------------------------------------------------------

def spot_plan() -> tuple[Plan, dict]:
    from policy_fixtures import load
    plan, config, _ = load(FIXTURES / "no-spot-only-critical" / "fail-aws-all-spot.json")
    return plan, config


def test_all_and_per_policy_enforcement():
    plan, _ = spot_plan()
    [v] = run_policies(plan, {"all": "advisory"})
    assert v.enforcement == "advisory"
    assert run_policies(plan, {"no-spot-only-critical": "disabled"}) == []
    [v] = run_policies(plan, {"all": "advisory", "no-spot-only-critical": {"enforcementLevel": "remediate"}})
    assert v.enforcement == "mandatory"  # stack policies cannot remediate: reported as mandatory


def test_config_numbers_arrive_as_the_engine_sends_them():
    plan, _ = spot_plan()
    # minOnDemandNodes travels as a float through the analyzer's Struct; the rule still reads it.
    assert len(run_policies(plan, {"no-spot-only-critical": {"criticalValues": ["gold"]}})) == 0
    assert len(run_policies(plan, {"no-spot-only-critical": {"minOnDemandNodes": 1}})) == 1


@pytest.mark.parametrize("content,fragment", [
    ("{not json", "is not JSON"),
    ("[]", "must be a JSON object"),
    ('{"no-such-policy": "advisory"}', "'no-such-policy' is not a policy of gpu-cluster-guardrails"),
    ('{"all": "loud"}', "enforcement level 'loud' is not one of"),
    ('{"single-zone": 3}', "must be an enforcement level or an object"),
    ('{"no-public-ssh": {"ports": ["22"]}}', "no-public-ssh: ports[0] must be an integer"),
    ('{"snapshot-schedule": {"minRetention": 0}}', "snapshot-schedule: minRetention must be at least 1"),
])
def test_bad_policy_config_files(tmp_path, content, fragment):
    path = tmp_path / "policy-config.json"
    path.write_text(content)
    with pytest.raises(UserError, match=re.escape(fragment)):
        load_policy_config(str(path))


def test_policy_config_file_in_pulumi_format(tmp_path):
    path = tmp_path / "policy-config.json"
    path.write_text(json.dumps({"all": {"enforcementLevel": "advisory"},
                                "dedicated-subnet": {"allowedSharedSubnetIds": ["subnet-0feedfacecafe0001"]}}))
    config = load_policy_config(str(path))
    assert load_policy_config(None) is None
    with pytest.raises(UserError, match="does not exist"):
        load_policy_config(str(tmp_path / "missing.json"))
    plan = Plan.load(FIXTURES / "acceptance" / "shared-subnet.export.json")
    assert run_policies(plan, config) == []


def test_violation_dict_and_table():
    v = Violation("dedicated-subnet", "mandatory", "urn:pulumi:s::p::aws:ec2/instance:Instance::gpu-0", "Move it.")
    assert v.as_dict() == {"policy": "dedicated-subnet", "enforcement": "mandatory",
                           "urn": "urn:pulumi:s::p::aws:ec2/instance:Instance::gpu-0", "message": "Move it."}
    table = format_violations([v, Violation("budget-covers-estimate", "advisory", "", "Raise it.")])
    lines = table.splitlines()
    assert lines[0].split() == ["level", "policy", "resource", "message"]
    assert "gpu-0 (Instance)" in lines[2] and "(stack)" in lines[3]
    assert lines[-1] == "2 violation(s), 1 mandatory"
    assert format_violations([]).startswith("no policy violations")


# ---- gpu-cluster check -------------------------------------------------------------------------------------

@pytest.mark.parametrize("export,policy", [("shared-subnet", "dedicated-subnet"),
                                           ("critical-all-spot", "no-spot-only-critical")])
def test_check_acceptance_exports(capsys, export, policy):
    path = FIXTURES / "acceptance" / f"{export}.export.json"
    assert main(["check", str(path)]) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert policy in out and "mandatory" in out


def test_check_clean_and_bad_inputs(capsys, tmp_path):
    assert main(["check", str(FIXTURES / "aws-baseline.json")]) == EXIT_OK
    assert main(["check", str(tmp_path / "none.json")]) == EXIT_BAD_INPUT
    bad = tmp_path / "cfg.json"
    bad.write_text('{"all": "loud"}')
    assert main(["check", str(FIXTURES / "aws-baseline.json"), "--policy-config", str(bad)]) == EXIT_BAD_INPUT
    assert "enforcement level 'loud'" in capsys.readouterr().err


def test_check_strict_fails_what_a_rule_cannot_see(capsys, tmp_path):
    from policy_fixtures import build

    case = json.loads((FIXTURES / "dedicated-subnet" / "pass-unknown-subnet-judged-at-the-update.json").read_text())
    export = tmp_path / "export.json"
    export.write_text(json.dumps(build(case)))
    assert main(["check", str(export)]) == EXIT_OK
    capsys.readouterr()
    assert main(["check", "--strict", str(export)]) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert "llm-node-2" in out and "subnet unknown until the update" in out
    # A policy the config disables stays disabled in strict mode.
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"dedicated-subnet": "disabled"}')
    capsys.readouterr()
    main(["check", "--strict", "--json", "--policy-config", str(cfg), str(export)])
    judged = {v["policy"] for v in json.loads(capsys.readouterr().out)["violations"]}
    assert "dedicated-subnet" not in judged and "no-public-ip" in judged
