"""The offline plan: every sample stack renders to a stack export; bad input exits 2 with no plan written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from offline.render import SAMPLE_STACKS

ROOT = Path(__file__).resolve().parent.parent
RESOURCE_KEYS = {"urn", "type", "custom", "inputs", "outputs", "parent", "protect", "dependencies"}


@pytest.mark.parametrize("stack", SAMPLE_STACKS)
def test_sample_stack_renders_as_a_stack_export(sample_plan, stack):
    plan = sample_plan(stack)
    urns = [r.urn for r in plan]
    assert len(urns) == len(set(urns)), "URNs must be unique"
    assert plan.resources[0].type == "pulumi:pulumi:Stack"
    stack_urn = plan.resources[0].urn
    assert stack_urn == f"urn:pulumi:{stack}::gpu-cluster::pulumi:pulumi:Stack::gpu-cluster-{stack}"
    known = set(urns)
    custom = list(plan.custom())
    assert len(custom) >= 15
    cloud = "aws" if stack.startswith("aws") else "tencentcloud"
    for r in custom:
        assert r.type.startswith(f"{cloud}:"), f"{stack} registers a foreign resource {r.type}"
        assert r.parent in known and r.parent != stack_urn, f"{r.urn} is not inside a component"
        assert set(r.dependencies) <= known
        assert r.provider.startswith(f"urn:pulumi:{stack}::gpu-cluster::pulumi:providers:{cloud}::")
    components = {r.type for r in plan if not r.custom and r.type != "pulumi:pulumi:Stack"}
    assert f"gpu-cluster:{cloud}:Cluster" in components and len(components) >= 6
    assert plan.stack.outputs.get("vpc_id") and plan.stack.outputs.get("subnet_id")


def _run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "offline", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_plan_file_has_every_resource_field(tmp_path):
    result = _run_cli("plan", "--stack", "aws-entry", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "aws-entry.json").read_text())
    assert doc["version"] == 3
    for r in doc["deployment"]["resources"][1:]:
        if not r["type"].startswith("pulumi:providers:"):
            assert RESOURCE_KEYS <= set(r), r["urn"]
    report = json.loads((tmp_path / "aws-entry.report.json").read_text())
    assert {"stack", "cloud", "tier", "nodes", "gpus", "resources", "monthly_cost", "violations"} <= set(report)
    assert (report["stack"], report["cloud"], report["tier"], report["nodes"], report["gpus"]) == (
        "aws-entry", "aws", "entry", 1, 1)
    assert "aws-entry" in result.stdout and "g4dn.xlarge" in result.stdout
    # One stack planned: every resource is listed, by component, protected ones marked.
    listed = [line.split() for line in result.stdout.splitlines() if line.startswith("    ")]
    managed = [r for r in doc["deployment"]["resources"][1:] if r["custom"] and not r["type"].startswith("pulumi:")]
    assert sorted((w[0], w[1]) for w in listed) == sorted((r["type"], r["urn"].rsplit("::", 1)[1]) for r in managed)
    assert {w[1] for w in listed if w[-1] == "[protected]"} == {
        r["urn"].rsplit("::", 1)[1] for r in managed if r["protect"]}


BAD_STACK = """\
config:
  aws:region: us-east-1
  gpu-cluster:cluster:
    name: bad
    cloud: aws
    zone: us-west-2a
    tier: mid
    instance_type: g5.12xlarge
    nodes: 0
    budget: {monthly_limit: 100, emails: []}
"""


def test_bad_stack_file_exits_2_with_sentences_and_writes_no_plan(tmp_path):
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(BAD_STACK)
    result = _run_cli("plan", "--stack-file", str(path), "--out", str(tmp_path / "plans"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr + result.stdout
    assert "cluster.nodes=0" in result.stderr and "cluster.budget.emails=[]" in result.stderr
    assert not (tmp_path / "plans").exists()


@pytest.mark.parametrize("content,fragment", [
    ("config: [", "not valid YAML"),
    ("config: {aws:region: us-east-1}", "no `gpu-cluster:cluster` value"),
    ("name: x", "no `config:` mapping"),
])
def test_unreadable_stack_files_exit_2(tmp_path, content, fragment):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(content)
    result = _run_cli("plan", "--stack-file", str(path), "--out", str(tmp_path / "plans"))
    assert result.returncode == 2 and fragment in result.stderr and "Traceback" not in result.stderr


def test_missing_stack_file_exits_2(tmp_path):
    result = _run_cli("plan", "--stack-file", str(tmp_path / "nope.yaml"), "--out", str(tmp_path))
    assert result.returncode == 2 and "does not exist" in result.stderr


def _make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_make_keeps_the_command_exit_statuses(tmp_path):
    """DESIGN §6: make plan / make check exit 0 clean, 1 on a mandatory violation, 2 on bad input."""
    acceptance = ROOT / "tests" / "fixtures" / "policies" / "acceptance"
    violating = _make("check", f"PLAN={acceptance / 'shared-subnet.export.json'}")
    assert violating.returncode == 1 and "dedicated-subnet" in violating.stdout
    assert _make("check", f"PLAN={tmp_path / 'missing.json'}").returncode == 2
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(BAD_STACK)
    result = _make("plan", f"STACK_FILE={bad}")
    assert result.returncode == 2 and "cluster.nodes=0" in result.stderr and "Traceback" not in result.stderr
