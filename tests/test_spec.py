"""The stack-file spec: good stacks load, every bad input is one sentence naming field, value and fix."""

from __future__ import annotations

import pytest

from components.spec import SpecError, load_spec
from conftest import merge
from gpu_cluster.render import SAMPLE_STACKS, read_stack_file, stack_path, validate

AWS = {
    "name": "llm-large", "cloud": "aws", "zone": "us-east-1a", "tier": "large", "nodes": 2,
    "budget": {"monthly_limit": 90000, "emails": ["mlops@example.com"]},
}
TENCENT = {
    "name": "tc-large", "cloud": "tencentcloud", "zone": "ap-shanghai-5", "tier": "large", "nodes": 2,
    "budget": {"monthly_limit": 900000, "currency": "CNY", "emails": ["mlops@example.com"]},
}
REGIONS = {"aws": "us-east-1", "tencentcloud": "ap-shanghai"}


def problems(cluster: dict, regions: dict = REGIONS) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(cluster, regions)
    return info.value.problems


@pytest.mark.parametrize("stack", SAMPLE_STACKS)
def test_sample_stacks_validate(stack):
    cluster = validate(read_stack_file(stack_path(stack)))
    assert cluster.spec.instance_type == cluster.shape.type
    assert cluster.spec.storage.root_gb and cluster.spec.snapshots.every_hours


# (base, changes, regions override, fragments every one of which the single message must contain)
BAD_INPUTS = [
    (AWS, {"nodes": "two"}, None, ["cluster.nodes='two'", "whole number", "1-64"]),
    (AWS, {"nodez": 2}, None, ["cluster.nodez", "unknown key 'nodez'", "nodes"]),
    (AWS, {"network": {"cdir": "10.0.0.0/16"}}, None, ["cluster.network.cdir", "allowed keys here: cidr, ssh_cidrs"]),
    (AWS, {"zone": "us-west-2a"}, None, ["cluster.zone='us-west-2a'", "aws:region='us-east-1'", "us-east-1[a-z]"]),
    (AWS, {"tier": "mid", "nodes": 1, "instance_type": "g5.12xlarge"}, None,
     ["cluster.instance_type='g5.12xlarge'", "4×A10G", "tier mid", "p4d.24xlarge"]),
    (AWS, {"tier": "entry", "nodes": 1, "instance_type": "p5.48xlarge"}, None,
     ["cluster.instance_type='p5.48xlarge'", "tier entry", "g4dn.xlarge", "g5.xlarge"]),
    (AWS, {"instance_type": "p9.huge"}, None, ["cluster.instance_type='p9.huge'", "not a catalogued", "p5.48xlarge"]),
    (AWS, {"nodes": 0}, None, ["cluster.nodes=0", "at least 1"]),
    (AWS, {"tier": "entry", "nodes": 5}, None, ["cluster.nodes=5", "tier entry", "1-4"]),
    (AWS, {"nodes": 65}, None, ["cluster.nodes=65", "1-64"]),
    (AWS, {"network": {"cidr": "8.8.0.0/16"}}, None, ["cluster.network.cidr='8.8.0.0/16'", "10.0.0.0/8"]),
    (AWS, {"network": {"cidr": "10.1.0.0/28"}}, None, ["cluster.network.cidr='10.1.0.0/28'", "/16 and /24"]),
    (AWS, {"budget": {"emails": []}}, None, ["cluster.budget.emails=[]", "at least 1", "at least one address"]),
    (AWS, {"budget": {"emails": ["mlops"]}}, None, ["cluster.budget.emails", "not e-mail addresses: ['mlops']"]),
    (AWS, {"budget": {"currency": "EUR"}}, None, ["cluster.budget.currency='EUR'", "allowed: USD"]),
    (AWS, {"budget": {"thresholds_pct": [0, 80]}}, None, ["cluster.budget.thresholds_pct", "1-1000"]),
    (AWS, {"storage": {"lustre": {"capacity_gib": 1000}}}, None,
     ["cluster.storage.lustre.capacity_gib=1000", "1200, 2400, then steps of 2400"]),
    (AWS, {"storage": {"lustre": {"throughput_per_tib": 300}}}, None,
     ["cluster.storage.lustre.throughput_per_tib=300", "125, 250, 500, 1000"]),
    (AWS, {"storage": {"lustre": {"import_path": "bucket/prefix"}}}, None,
     ["cluster.storage.lustre.import_path='bucket/prefix'", "s3://"]),
    (AWS, {"snapshots": {"every_hours": 5}}, None, ["cluster.snapshots.every_hours=5", "1, 2, 3, 4, 6, 8, 12, 24"]),
    (AWS, {"name": "LLM_Large"}, None, ["cluster.name='LLM_Large'", "lower-case letters, digits and single hyphens"]),
    (AWS, {"tier": "huge"}, None, ["cluster.tier='huge'", "'entry', 'mid' or 'large'"]),
    (AWS, {"purchase": "reserved"}, None, ["cluster.purchase='reserved'", "'on_demand', 'spot' or 'mixed'"]),
    (AWS, {"image_id": "ubuntu-22.04"}, None, ["cluster.image_id='ubuntu-22.04'", "ami-"]),
    (AWS, {"scheduler": "pbs"}, None, ["cluster.scheduler='pbs'", "'slurm' or 'none'"]),
    (AWS, {}, {"aws": None}, ["aws:region is not set", "aws:region: us-east-1"]),
    (AWS, {"tags": {"aws:owner": "x"}}, None, ["cluster.tags", "reserved tag keys"]),
    (TENCENT, {"storage": {"lustre": {"capacity_gib": 30000, "throughput_per_tib": 100}}}, None,
     ["cluster.storage.lustre.capacity_gib=30000", "CFS Turbo TB", "40960", "20480"]),
    (TENCENT, {"storage": {"lustre": {"throughput_per_tib": 250}}}, None,
     ["cluster.storage.lustre.throughput_per_tib=250", "100 (TB)", "200 (TP)"]),
    (TENCENT, {"storage": {"lustre": {"import_path": "s3://data/x"}}}, None,
     ["cluster.storage.lustre.import_path='s3://data/x'", "AWS only"]),
    (TENCENT, {"tier": "entry", "nodes": 1, "instance_type": "GN7.2XLARGE32", "zone": "ap-shanghai-5",
               "storage": {"scratch": "nvme"}}, None,
     ["cluster.storage.scratch='nvme'", "GN7.2XLARGE32 has no local NVMe", "disk or none"]),
    (TENCENT, {"tier": "mid", "nodes": 1, "zone": "ap-shanghai-2"}, None,
     ["cluster.zone='ap-shanghai-2'", "GT4.20XLARGE474 is sold only in"]),
    (TENCENT, {"budget": {"currency": "EUR"}}, None, ["cluster.budget.currency='EUR'", "CNY, USD"]),
    (AWS, {"budget": {"emails": [f"u{i}@example.com" for i in range(11)]}}, None,
     ["cluster.budget.emails has 11 addresses", "at most 10"]),
    (TENCENT, {"network": {"existing_subnet_id": "subnet-1a2b3c4d"}}, None,
     ["cluster.storage.lustre with cluster.network.existing_subnet_id", "lustre: null"]),
    # What a newcomer tried that used to be accepted, or explained in library words.
    (AWS, {}, {"aws": "mars-north-9"}, ["aws:region='mars-north-9' is not a region of aws", "us-east-1"]),
    (AWS, {}, {"aws": 5}, ["aws:region=5 is not a region of aws"]),
    (AWS, {"budget": {"monthly_limit": float("inf")}}, None, ["cluster.budget.monthly_limit=inf", "finite number"]),
    (AWS, {"budget": {"monthly_limit": 1e12}}, None, ["cluster.budget.monthly_limit", "at most 100,000,000"]),
    (AWS, {"budget": {"monthly_limit": True}}, None, ["cluster.budget.monthly_limit=true", "must be a number"]),
    (AWS, {"snapshots": {"every_hours": 0}}, None, ["cluster.snapshots.every_hours=0", "at least 1"]),
    (AWS, {"snapshots": {"retain": 0}}, None, ["cluster.snapshots.retain=0", "at least 1"]),
    (AWS, {"nodes": True}, None, ["cluster.nodes=true", "whole number"]),
    (AWS, {"nodes": 2.5}, None, ["cluster.nodes=2.5", "whole number"]),
    (AWS, {"name": "ab-"}, None, ["cluster.name='ab-'", "ending with a letter or digit"]),
    (AWS, {"name": "xn--abc"}, None, ["cluster.name='xn--abc'", "single hyphens"]),
    (AWS, {"name": "sthree-data"}, None, ["cluster.name='sthree-data'", "sthree-"]),
    (AWS, {"tags": {"": "x"}}, None, ["cluster.tags: key ''", "1-128 characters"]),
    (AWS, {"tags": {"team": "x" * 400}}, None, ["cluster.tags.team=", "0-256 characters"]),
    (AWS, {"tags": {"kubernetes.io/cluster": "x"}}, None, ["cluster.tags: key 'kubernetes.io/cluster'", "tag key on aws"]),
    (TENCENT, {"tags": {"team": ""}}, None, ["cluster.tags.team=''", "1-255 characters"]),
    (AWS, {"network": {"ssh_cidrs": [5]}}, None, ["cluster.network.ssh_cidrs=[5]", "IPv4 range"]),
    (AWS, {"network": {"egress_mbps": 200}}, None, ["cluster.network.egress_mbps=200", "leave it out"]),
    (TENCENT, {"network": {"egress_mbps": 5000}}, None, ["cluster.network.egress_mbps=5000", "at most 1,000"]),
    (AWS, {"storage": {"checkpoint_bucket": "yes"}}, None, ["cluster.storage.checkpoint_bucket='yes'", "true or false"]),
    (AWS, {"network": 5}, None, ["cluster.network=5", "mapping of settings"]),
    (AWS, {"image_id": None, "zone": 7}, None, ["cluster.zone=7", "must be text"]),
    (TENCENT, {"purchase": "spot", "tier": "mid", "nodes": 1, "storage": {"scratch": "disk", "lustre": None}}, None,
     ["cluster.storage.scratch='disk' with purchase=spot", "POSTPAID_BY_HOUR", "scratch: none"]),
]


@pytest.mark.parametrize("base,changes,regions,fragments", BAD_INPUTS,
                         ids=[f"{i:02d}" for i in range(len(BAD_INPUTS))])
def test_bad_input_is_one_clear_sentence(base, changes, regions, fragments):
    found = problems(merge(base, changes), {**REGIONS, **(regions or {})})
    assert len(found) == 1, found
    for fragment in fragments:
        assert fragment in found[0], (fragment, found[0])


def test_no_message_speaks_library_jargon():
    for base, changes, regions, _ in BAD_INPUTS:
        for problem in problems(merge(base, changes), {**REGIONS, **(regions or {})}):
            for word in ("tuple", "instance of", "None", "Input should", "pydantic", "dict", "a aws"):
                assert word not in problem, (word, problem)


def test_bad_input_table_covers_fifteen_distinct_fields():
    fields = {f[0].split("=")[0].split(":")[0] for *_, f in BAD_INPUTS}
    assert len(BAD_INPUTS) >= 15 and len(fields) >= 15, sorted(fields)


def test_every_problem_is_reported_at_once():
    found = problems(merge(AWS, {"nodes": 0, "tier": "huge", "budget": {"emails": []}, "colour": "red"}))
    assert [p.split("=")[0].split(":")[0] for p in found] == [
        "cluster.tier", "cluster.nodes", "cluster.budget.emails", "cluster.colour"]


def test_cross_field_problems_are_reported_together():
    found = problems(merge(AWS, {"zone": "us-west-2a", "nodes": 80, "snapshots": {"every_hours": 5},
                                 "storage": {"lustre": {"capacity_gib": 1000}}}))
    assert len(found) == 4


def test_not_a_mapping():
    with pytest.raises(SpecError, match="must be a mapping"):
        load_spec(["aws"], REGIONS)


def test_defaults_come_from_the_tier():
    cluster = load_spec(AWS, REGIONS)
    storage = cluster.spec.storage
    assert (storage.root_gb, storage.scratch) == (500, "nvme")
    assert (storage.lustre.capacity_gib, storage.lustre.throughput_per_tib) == (4800, 500)
    assert (cluster.spec.snapshots.every_hours, cluster.spec.snapshots.retain) == (6, 14)


def test_lustre_null_means_none_and_omitted_means_tier_default():
    assert load_spec(merge(AWS, {"storage": {"lustre": None}}), REGIONS).spec.storage.lustre is None
    entry = merge(AWS, {"tier": "entry", "nodes": 1})
    assert load_spec(entry, REGIONS).spec.storage.lustre is None


def test_spot_with_critical_is_allowed_so_the_policy_pack_can_reject_it():
    cluster = load_spec(merge(AWS, {"purchase": "spot", "criticality": "critical"}), REGIONS)
    # No spot warning: the policy pack's verdict is the one place that speaks (the quota note names the
    # spot quota the nodes draw on, which is not a warning about spot).
    assert cluster.spec.purchase == "spot"
    assert not any("spot" in n.lower() for n in cluster.notes if not n.startswith("EC2 vCPU quota:"))


def test_tencent_spot_renders_with_a_china_site_warning():
    cluster = load_spec(merge(TENCENT, {"purchase": "spot"}), REGIONS)
    assert any("China site only" in n and "SPOTPAID" in n for n in cluster.notes)


def test_aws_mid_says_plainly_that_it_is_eight_a100():
    cluster = load_spec(merge(AWS, {"tier": "mid", "nodes": 1}), REGIONS)
    assert cluster.shape.type == "p4d.24xlarge" and cluster.gpus == 8
    assert any("no 4×A100" in n and "p4d.24xlarge" in n and "GT4.20XLARGE474" in n for n in cluster.notes)


def test_tags_carry_cluster_identity_then_user_tags():
    cluster = load_spec(merge(AWS, {"tags": {"team": "research"}}), REGIONS)
    assert cluster.tags == {"gpu-cluster:name": "llm-large", "gpu-cluster:tier": "large",
                            "gpu-cluster:criticality": "standard", "managed-by": "pulumi", "team": "research"}


def test_spec_is_frozen():
    cluster = load_spec(AWS, REGIONS)
    with pytest.raises(Exception):
        cluster.spec.nodes = 3
