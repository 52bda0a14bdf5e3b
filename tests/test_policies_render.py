"""The policy pack on mocked renders of the real program: sample stacks and spec variants."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from gpu_cluster.cli import main
from gpu_cluster.errors import EXIT_VIOLATION
from gpu_cluster.plan import Plan
from gpu_cluster.policyrun import run_policies
from policy_fixtures import INCOMPLETE, judged_violations
from gpu_cluster.render import SAMPLE_STACKS
from policy_fixtures import sample_doc as doc_of


def found(plan: Plan, **kw) -> set[tuple[str, str]]:
    return {(v.policy, v.urn.rsplit("::", 1)[-1]) for v in run_policies(plan, **kw)
            if not v.message.startswith(INCOMPLETE)}


def nodes(plan: Plan) -> list[str]:
    """The GPU nodes' names: the Slurm head node (a CPU machine, tagged gpu-cluster:role=head) is no GPU
    capacity, and the GPU rules say nothing of it."""
    types = ("aws:ec2/instance:Instance", "tencentcloud:Instance/instance:Instance")
    return [r.name for r in plan.resources
            if r.type in types and (r.inputs.get("tags") or {}).get("gpu-cluster:role") != "head"]


def drop(resource: dict, key: str) -> None:
    """Remove a property from a rendered resource (the mocks echo inputs into outputs)."""
    resource["inputs"].pop(key, None)
    resource["outputs"].pop(key, None)


def first(doc: dict, type_: str) -> dict:
    return next(r for r in doc["deployment"]["resources"] if r["type"] == type_)


@pytest.mark.parametrize("stack", SAMPLE_STACKS)
def test_sample_stacks_pass_clean(stack):
    """Nothing but, on Tencent Cloud, the advisory that the estimate leaves out what has no public price: the Slurm
    head node's Standard S5 everywhere, and the GPU nodes of the A100 and H20 shapes: the budget may not cover it."""
    violations = run_policies(Plan.from_doc(doc_of(stack)))
    if stack.startswith("tencent"):
        [v] = violations
        assert (v.policy, v.enforcement) == ("budget-covers-estimate", "advisory") and v.message.startswith(INCOMPLETE)
        assert "head node 1 × S5.LARGE8" in v.message and "NAT gateway" not in v.message
        assert ("GPU node" in v.message) == (stack in ("tencent-mid", "tencent-large", "tencent-prepaid"))
    else:
        assert violations == []


# On Tencent a shared subnet rules out CFS Turbo (its CCN range needs the stack's own VPC): lustre off.
@pytest.mark.parametrize("stack,changes", [
    ("aws-large", {"network": {"existing_subnet_id": "subnet-0123456789abcdef0"}}),
    ("tencent-large", {"network": {"existing_subnet_id": "subnet-1a2b3c4d"}, "storage": {"lustre": None}}),
])
def test_existing_subnet_is_a_shared_subnet(render_cluster, stack, changes):
    plan = render_cluster(stack, changes)
    assert found(plan) == {("dedicated-subnet", n) for n in nodes(plan)}


@pytest.mark.parametrize("stack", ["aws-large", "tencent-large"])
def test_critical_spot_cluster(render_cluster, stack):
    plan = render_cluster(stack, {"purchase": "spot"})
    assert found(plan) == {("no-spot-only-critical", nodes(plan)[0])}


def test_critical_mixed_cluster_passes(render_cluster):
    assert found(render_cluster("aws-large", {"purchase": "mixed"})) == set()


def test_experimental_spot_cluster_passes(render_cluster):
    assert found(render_cluster("aws-large", {"purchase": "spot", "criticality": "experimental"})) == set()


@pytest.mark.parametrize("stack,rule", [("aws-entry", "ml-entry-network-nodes-ssh-0"), ("tencent-entry", "tc-entry-sg-rules")])
def test_ssh_from_anywhere(render_cluster, stack, rule):
    assert found(render_cluster(stack, {"network": {"ssh_cidrs": ["0.0.0.0/0"]}})) == {("no-public-ssh", rule)}


def test_ssh_from_a_named_range_passes(render_cluster):
    assert found(render_cluster("aws-entry", {"network": {"ssh_cidrs": ["203.0.113.0/24"]}})) == set()
    assert found(render_cluster("aws-entry", {"network": {"ssh_cidrs": ["100.16.0.0/16"]}})) == set()  # a /16: the limit


def _all_but(address: str) -> list[str]:
    import ipaddress

    return [str(n) for n in ipaddress.ip_network("0.0.0.0/0").address_exclude(ipaddress.ip_network(address))]


@pytest.mark.parametrize("cidrs", [["0.0.0.0/1"], ["8.0.0.0/8"], ["100.16.0.0/15"], _all_but("8.8.8.8/32")],
                         ids=["half-the-internet", "a-public-slash-8", "a-slash-15", "all-but-one-address"])
@pytest.mark.parametrize("stack,rule", [("aws-entry", "ml-entry-network-nodes-ssh-0"), ("tencent-entry", "tc-entry-sg-rules")])
def test_ssh_from_nearly_the_whole_internet_is_the_internet(render_cluster, stack, rule, cidrs):
    """A pull-request gate bypass found by an adversarial review: ranges that leave a few public addresses
    out still open SSH to the internet; more public addresses than a /16 holds count as the internet."""
    plan = render_cluster(stack, {"network": {"ssh_cidrs": cidrs}})
    got = found(plan)
    assert got and {policy for policy, _ in got} == {"no-public-ssh"}
    if len(cidrs) == 1 or stack.startswith("tencent"):  # AWS renders one rule per range, Tencent one rule set
        assert got == {("no-public-ssh", rule)}


# One property changed on a rendered plan: the remaining rules on real resource shapes.

def test_rendered_placement_and_rdma():
    doc = doc_of("aws-large")
    lt = first(doc, "aws:ec2/launchTemplate:LaunchTemplate")
    lt["inputs"]["networkInterfaces"] = lt["inputs"]["networkInterfaces"][:16]
    drop(lt, "placement")
    for r in doc["deployment"]["resources"]:
        if r["type"] == "aws:ec2/instance:Instance":
            drop(r, "placementGroup")
    plan = Plan.from_doc(doc)
    name = lt["urn"].rsplit("::", 1)[-1]
    assert found(plan) == {("rdma-enabled", name)} | {("placement-required", n) for n in nodes(plan)}


def test_rendered_tencent_hpc_cluster_missing():
    doc = doc_of("tencent-large")
    for r in doc["deployment"]["resources"]:
        if r["type"] == "tencentcloud:Instance/instance:Instance":
            drop(r, "hpcClusterId")
    plan = Plan.from_doc(doc)
    assert found(plan) == {("placement-required", n) for n in nodes(plan)}


@pytest.mark.parametrize("stack,type_,change,policy", [
    ("aws-large", "aws:fsx/lustreFileSystem:LustreFileSystem", {"protect": False}, "stateful-protected"),
    ("tencent-mid", "tencentcloud:Cos/bucket:Bucket", {"protect": False}, "stateful-protected"),
    ("aws-large", "aws:ebs/volume:Volume", {"inputs.encrypted": False}, "storage-encrypted"),
    ("tencent-mid", "tencentcloud:Cbs/storage:Storage", {"inputs.encrypt": False}, "storage-encrypted"),
    ("aws-large", "aws:ec2/launchTemplate:LaunchTemplate", {"inputs.metadataOptions.httpTokens": "optional"}, "imdsv2-required"),
    ("aws-large", "aws:fsx/lustreFileSystem:LustreFileSystem", {"inputs.automaticBackupRetentionDays": 0}, "snapshot-schedule"),
    ("tencent-mid", "tencentcloud:Cos/bucket:Bucket", {"inputs.versioningEnable": False}, "checkpoint-bucket-private"),
    ("aws-large", "aws:ebs/volume:Volume", {"inputs.availabilityZone": "us-east-1b"}, "single-zone"),
])
def test_rendered_single_property(stack, type_, change, policy):
    doc = doc_of(stack)
    res = first(doc, type_)
    for path, value in change.items():
        obj, keys = res, path.split(".")
        for k in keys[:-1]:
            obj = obj[k]
        obj[keys[-1]] = value
    assert found(Plan.from_doc(doc)) == {(policy, res["urn"].rsplit("::", 1)[-1])}


@pytest.mark.parametrize("stack,type_", [("aws-entry", "aws:budgets/budget:Budget"),
                                         ("tencent-entry", "tencentcloud:Billing/budget:Budget")])
def test_rendered_budget_missing(stack, type_):
    doc = doc_of(stack)
    doc["deployment"]["resources"].remove(first(doc, type_))
    plan = Plan.from_doc(doc)
    assert found(plan) == {("budget-alarm", nodes(plan)[0])}


def test_rendered_unversioned_bucket():
    doc = doc_of("aws-entry")
    doc["deployment"]["resources"].remove(first(doc, "aws:s3/bucketVersioning:BucketVersioning"))
    bucket = first(doc, "aws:s3/bucket:Bucket")
    assert found(Plan.from_doc(doc)) == {("checkpoint-bucket-private", bucket["urn"].rsplit("::", 1)[-1])}


def test_rendered_estimate_over_budget():
    plan = Plan.from_doc(doc_of("aws-large"))
    pricey = SimpleNamespace(total=150_000.0, currency="USD", unpriced=[])
    [v] = run_policies(plan, pricer=lambda p: pricey)
    assert (v.policy, v.enforcement) == ("budget-covers-estimate", "advisory")


def test_critical_spot_stack_file_renders_and_fails(tmp_path, capsys):
    stack_file = Path(__file__).parent / "fixtures" / "policies" / "acceptance" / "Pulumi.critical-spot.yaml"
    assert main(["plan", "--stack-file", str(stack_file), "--out", str(tmp_path)]) == EXIT_VIOLATION
    import json
    report = json.loads((tmp_path / "critical-spot.report.json").read_text())
    assert [(v["policy"], v["enforcement"]) for v in report["violations"]] == [("no-spot-only-critical", "mandatory")]
    assert "no-spot-only-critical" in capsys.readouterr().out
