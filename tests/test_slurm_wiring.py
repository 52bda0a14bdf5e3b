"""Slurm wired into both clouds (scheduler: slurm; on Tencent Cloud with an Ubuntu image, which Slurm needs
there): the head node, the munge-key secret that no plan holds a value of, the GPU nodes' Slurm boot, the roles, the security group, the alarms and
scheduler: none taking it all away. Every plan is the real program rendered under the mocks."""

from __future__ import annotations

import ipaddress
import json
import re
import sys
from typing import Any, Iterator

import pytest

from components.cloudinit import USER_DATA_LIMIT, decode, encode, size_problem
from components.headnode import HEAD_INSTANCE_TYPES, HEAD_HOST_OFFSET, head_address
from components.slurm.conf import SLURMCTLD_PORT
from components.slurm.oses import EL8_OPENHPC, KEYS, SLURM_RELEASE
from conftest import (BOOT_USER_DATA, TENCENT_UBUNTU_IMAGE, boot_document, gpu_nodes, head_node, load_yaml, node_files,
                      render_plan, slurm_rendered, slurm_stack_with)
from conftest import stack_with as stack_with_cluster
from gpu_cluster.plan import Plan
from gpu_cluster.stackfile import ROOT
from policy_fixtures import judged_violations
from gpu_cluster.render import SAMPLE_STACKS

AWS_INSTANCE = "aws:ec2/instance:Instance"
TC_INSTANCE = "tencentcloud:Instance/instance:Instance"
AWS_SECRET = "aws:secretsmanager/secret:Secret"
TC_SECRET = "tencentcloud:Ssm/secret:Secret"
SECRET_VALUES = ("aws:secretsmanager/secretVersion:SecretVersion", "tencentcloud:Ssm/secretVersion:SecretVersion")
LT = "aws:ec2/launchTemplate:LaunchTemplate"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"


def instance_type(stack: str) -> str:
    return AWS_INSTANCE if stack.startswith("aws") else TC_INSTANCE


def cloud(stack: str) -> str:
    return "aws" if stack.startswith("aws") else "tencentcloud"


def files(document: str) -> dict[str, str]:
    return {f["path"]: f["content"] for f in load_yaml(document).get("write_files", [])}


def node_documents(plan: Plan, stack: str) -> list[str]:
    """The GPU nodes' boot documents: the one launch template (AWS) or each node's own (Tencent)."""
    if cloud(stack) == "aws":
        return [boot_document(plan.one(LT))]
    return [boot_document(n) for n in sorted(gpu_nodes(plan, TC_INSTANCE), key=lambda r: r.name)]


def node_file_sets(plan: Plan, stack: str) -> list[dict[str, str]]:
    """Every file each GPU node boots with, in node_documents' order: a Tencent node's Slurm files come from its
    Slurm boot in the boot bucket (components/slurm/bundle.py)."""
    if cloud(stack) == "aws":
        return [files(boot_document(plan.one(LT)))]
    return [node_files(plan, n) for n in sorted(gpu_nodes(plan, TC_INSTANCE), key=lambda r: r.name)]


# ---- the munge key is in no plan ----------------------------------------------------------------------

KEYLIKE = re.compile(r"[A-Za-z0-9+/]{44,}={0,2}")
"""A munge key is 32-1024 random bytes (components/slurm/scripts.py), so any copy of one in base64 is a
run of at least 44 base64 characters."""
SHIPPED_KEYS = tuple(p.read_text() for p in sorted(KEYS.iterdir()))
"""components/slurm/keys: public repository signing keys, shipped verbatim (their base64 armor is no munge key)."""
SHA256 = re.compile(r"[0-9a-f]{64}")
"""A SHA-256 in hex (the hash a Tencent node's user data pins of its Slurm boot: components/slurm/bundle.py), which
is no key: 64 of the 16 lowercase hex digits only."""


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value


def keylike(doc: dict) -> set[str]:
    """Every key-like run in a plan document, user data searched decompressed (the compressed text itself
    is base64 and says nothing)."""
    found = set()
    for text in _strings(doc):
        try:
            decoded = decode(text)
        except Exception:  # noqa: BLE001 - not base64 user data: search it as it is
            decoded = None
        if decoded is not None and decoded.startswith("#cloud-config"):
            text = decoded
        for shipped in SHIPPED_KEYS:  # the public signing keys the package install trusts, verbatim, are no secret
            text = text.replace(shipped, "")
        found |= {k for k in KEYLIKE.findall(text) if not SHA256.fullmatch(k)}
    return found


@pytest.mark.parametrize("stack", SAMPLE_STACKS)
def test_every_sample_stack_has_one_head_node_and_a_munge_secret_with_no_value(stack):
    rendered = slurm_rendered(stack)
    doc = rendered.plan()
    plan = Plan.from_doc(doc)
    head = head_node(plan, instance_type(stack))
    assert head.inputs["instanceType"] == HEAD_INSTANCE_TYPES[cloud(stack)]
    (secret,) = plan.of_type(AWS_SECRET if cloud(stack) == "aws" else TC_SECRET)
    name = rendered.cluster.name
    assert (secret.inputs.get("name") or secret.inputs.get("secretName")) == f"{name}-munge-key"
    assert not plan.of_type(*SECRET_VALUES), "the key is made on the head node, never by the stack"
    assert keylike(doc) == set()
    # Every boot script names the secret and reads it at boot; none carries a value.
    scripts = [content for f in [node_files(plan, head), *node_file_sets(plan, stack)]
               for p, content in f.items() if p.endswith("/munge-key")]
    assert len(scripts) == 1 + len(node_documents(plan, stack))
    assert all(f"SECRET_ID='{name}-munge-key'\n" in s for s in scripts)


def test_the_key_search_finds_a_key_where_there_is_one():
    """The search above is not vacuous: a munge key in a resource, or inside a node's user data, is found."""
    doc = slurm_rendered("aws-entry").plan()
    key = "q3Zr0Xy+4kV9mPbT2wLc8NfHs1JdGe7uYaQ5tRoIzWx6vBnMlKjCiEhUgSpOy0A="  # 46 base64 characters
    secret = next(r for r in doc["deployment"]["resources"] if r["type"] == AWS_SECRET)
    secret["inputs"]["description"] = key
    assert keylike(doc) == {key}
    doc = slurm_rendered("tencent-entry").plan()
    node = next(r for r in doc["deployment"]["resources"] if r["type"] == TC_INSTANCE)
    node["inputs"]["userData"] = encode(decode(node["inputs"]["userData"]) + f"# {key}\n")
    assert keylike(doc) == {key}


# ---- Slurm configuration, as the head node boots with it --------------------------------------------

@pytest.mark.parametrize("stack", ["aws-large", "tencent-large"])
def test_a_two_node_large_plan_declares_16_gpus_as_gres(stack, slurm_plan):
    plan = slurm_plan(stack)
    head_files = node_files(plan, head_node(plan, instance_type(stack)))
    conf, gres = head_files["/etc/slurm/slurm.conf"], head_files["/etc/slurm/gres.conf"]
    declared = 0
    for line in conf.splitlines():
        if line.startswith("NodeName="):
            fields = dict(f.split("=", 1) for f in line.split())
            runs = re.fullmatch(r".*\[(.*)\]", fields["NodeName"]).group(1).split(",")
            count = sum(int(b or a) - int(a) + 1 for a, _, b in (r.partition("-") for r in runs))
            declared += count * int(fields["Gres"].rsplit(":", 1)[1])
    assert declared == 16
    (line,) = [ln for ln in gres.splitlines() if ln.startswith("NodeName=")]
    name = plan.stack.outputs["munge_secret"].rsplit(":", 1)[-1].split("-munge-key")[0]
    gpu = {"aws-large": "h100", "tencent-large": "h20"}[stack]
    assert line == f"NodeName={name}-node-[0-1] Name=gpu Type={gpu} File=/dev/nvidia[0-7]"
    assert "GresTypes=gpu\n" in conf and re.search(r"^SlurmctldParameters=enable_configless,cloud_reg_addrs(,|$)", conf, re.M)


@pytest.mark.parametrize("stack", ["aws-large", "tencent-large", "aws-entry", "tencent-entry"])
def test_every_gpu_node_boots_configless_slurmd_pointed_at_the_head_node(stack, slurm_plan):
    plan = slurm_plan(stack)
    address = plan.stack.outputs["head_address"]
    head = head_node(plan, instance_type(stack))
    assert head.inputs["privateIp"] == address
    for i, (document, own) in enumerate(zip(node_documents(plan, stack), node_file_sets(plan, stack))):
        assert f"CONF_SERVER='{address}:{SLURMCTLD_PORT}'\n" in own["/opt/gpu-cluster/bin/node-setup"]
        identity = own["/opt/gpu-cluster/bin/node-identity"]
        if cloud(stack) == "aws":  # one document for all nodes: the index comes from the instance's tag
            assert "NODE_INDEX=''\n" in identity and "INDEX_PATH='tags/instance/gpu-cluster:node'\n" in identity
            assert "slurmd" in load_yaml(document)["packages"]
        else:  # each node its own document; on TencentOS slurmd comes from OpenHPC, pinned to one release
            assert f"NODE_INDEX='{i}'\n" in identity
            install = own["/usr/local/sbin/gpu-cluster-slurm-packages"]
            assert f"slurm-slurmd-ohpc-{SLURM_RELEASE} " in install and "slurm-slurmd-ohpc" not in str(
                load_yaml(document).get("packages"))
    # The GPU nodes are created after the head node, so none can take its address first.
    for node in gpu_nodes(plan, instance_type(stack)):
        assert head.urn in node.dependencies


def test_aws_nodes_can_read_their_index_tag_from_the_instance_metadata(slurm_plan):
    plan = slurm_plan("aws-large")
    assert plan.one(LT).inputs["metadataOptions"]["instanceMetadataTags"] == "enabled"
    for i, node in enumerate(sorted(gpu_nodes(plan, AWS_INSTANCE), key=lambda r: r.name)):
        assert node.inputs["metadataOptions"]["instanceMetadataTags"] == "enabled"
        assert node.inputs["tags"]["gpu-cluster:node"] == str(i)


# ---- the head node ----------------------------------------------------------------------------------

def test_aws_head_node_is_private_imdsv2_encrypted_in_the_cluster_subnet(slurm_plan):
    plan = slurm_plan("aws-large")
    head = head_node(plan, AWS_INSTANCE).inputs
    subnet = next(r for r in plan.of_type("aws:ec2/subnet:Subnet") if r.name.endswith("-network-subnet"))
    sg = next(r for r in plan.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name.endswith("-network-nodes"))
    assert head["subnetId"] == subnet.id and head["vpcSecurityGroupIds"] == [sg.id]
    assert head["availabilityZone"] == "us-east-1a" and head["associatePublicIpAddress"] is False
    assert head["metadataOptions"]["httpTokens"] == "required"
    assert head["rootBlockDevice"]["encrypted"] is True
    assert head["privateIp"] == head_address(subnet.inputs["cidrBlock"])
    assert ipaddress.ip_address(head["privateIp"]) in ipaddress.ip_network(subnet.inputs["cidrBlock"])
    assert head["disableApiTermination"] is True  # critical
    assert head["userDataReplaceOnChange"] is True
    assert (slurm_plan("aws-entry").stack.outputs["head_address"], ) == ("10.41.0.10",)


def test_tencent_head_node_is_private_in_the_cluster_subnet_with_its_role(slurm_plan):
    plan = slurm_plan("tencent-large")
    head = head_node(plan, TC_INSTANCE).inputs
    subnet = plan.one("tencentcloud:Subnet/instance:Instance")
    group = plan.one("tencentcloud:Security/group:Group")
    assert (head["subnetId"], head["orderlySecurityGroups"], head["availabilityZone"]) == (
        subnet.id, [group.id], "ap-shanghai-5")
    assert head["allocatePublicIp"] is False and head["hostname"] == "tc-large-head"
    assert head["privateIp"] == head_address(subnet.inputs["cidrBlock"]) == "10.50.0.10"
    # Not protected although tc-large is critical: a Slurm change replaces it, and Tencent's Delete does
    # not lift the protection (the contract's delete_refused_while; test_review.py).
    assert head["instanceChargeType"] == "POSTPAID_BY_HOUR" and head["disableApiTermination"] is False
    assert head["userDataReplaceOnChange"] is True and "hpcClusterId" not in head
    assert load_yaml(boot_document(head_node(plan, TC_INSTANCE)))["hostname"] == "tc-large-head"


@pytest.mark.parametrize("stack", ["aws-entry", "tencent-entry"])
def test_the_fixed_address_is_freed_before_a_new_head_node_takes_it(stack):
    regs = slurm_rendered(stack).registrations
    heads = [r for r in regs if r.type == instance_type(stack) and r.inputs["tags"].get("gpu-cluster:role") == "head"]
    assert len(heads) == 1 and heads[0].delete_before_replace
    # Nothing else goes first, but for what its provider cannot replace the other way round (its contract).
    from gpu_cluster import contracts
    assert not [r.name for r in regs if r.delete_before_replace and r not in heads
                and not contracts.contract(r.type).delete_before_replace]


def test_the_head_node_state_lives_on_its_own_protected_snapshotted_disk(slurm_plan):
    plan = slurm_plan("aws-large")
    head = head_node(plan, AWS_INSTANCE)
    (volume,) = [v for v in plan.of_type("aws:ebs/volume:Volume") if v.name.endswith("-head-data")]
    assert volume.protect and volume.inputs["encrypted"] is True
    assert head.inputs["tags"]["gpu-cluster:data-volume"] == volume.id
    dlm = plan.one("aws:dlm/lifecyclePolicy:LifecyclePolicy").inputs["policyDetails"]
    assert dlm["targetTags"].items() <= volume.inputs["tags"].items()
    attached = {(a.inputs["volumeId"], a.inputs["instanceId"])
                for a in plan.of_type("aws:ec2/volumeAttachment:VolumeAttachment")}
    assert (volume.id, head.id) in attached
    assert "StateSaveLocation=/data/slurm/state\n" in files(boot_document(head))["/etc/slurm/slurm.conf"]

    tc = slurm_plan("tencent-large")
    (disk,) = [d for d in tc.of_type("tencentcloud:Cbs/storage:Storage") if d.name.endswith("-head-data")]
    assert disk.protect and disk.inputs["encrypt"] is True
    snapshots = {a.inputs["storageId"] for a in tc.of_type("tencentcloud:Cbs/snapshotPolicyAttachment:SnapshotPolicyAttachment")}
    assert disk.id in snapshots
    attach = {(a.inputs["storageId"], a.inputs["instanceId"]) for a in tc.of_type("tencentcloud:Cbs/storageAttachment:StorageAttachment")}
    assert (disk.id, head_node(tc, TC_INSTANCE).id) in attach
    assert f"echo {disk.id}" in files(boot_document(head_node(tc, TC_INSTANCE)))["/usr/local/sbin/gpu-cluster-data"]


# ---- network and roles ------------------------------------------------------------------------------

def test_slurm_traffic_flows_only_within_the_cluster_security_group(slurm_plan):
    """slurmctld 6817, slurmd 6818 and srun's ephemeral ports: all inside the group, from the group itself."""
    plan = slurm_plan("aws-large")
    sg = next(r for r in plan.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name.endswith("-network-nodes"))
    ingress = [r.inputs for r in plan.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
               if r.inputs["securityGroupId"] == sg.id]
    (own,) = [r for r in ingress if r.get("referencedSecurityGroupId") == sg.id]
    assert own["ipProtocol"] == "-1"
    assert not [r for r in ingress if r.get("cidrIpv4") in ("0.0.0.0/0",)]
    for r in ingress:  # anything else in is narrower: the Lustre servers' group, SSH from the given ranges
        assert r.get("referencedSecurityGroupId") or r.get("fromPort") == 22

    tc = slurm_plan("tencent-large")
    group = tc.one("tencentcloud:Security/group:Group")
    rules = tc.one("tencentcloud:Security/groupRuleSet:GroupRuleSet").inputs["ingresses"]
    (own,) = [r for r in rules if r.get("sourceSecurityId") == group.id]
    assert (own["protocol"], own["port"], own["action"]) == ("ALL", "all", "ACCEPT")
    assert not [r for r in rules if r.get("cidrBlock") == "0.0.0.0/0"]
    assert head_node(tc, TC_INSTANCE).inputs["orderlySecurityGroups"] == [group.id]


def _aws_statements(plan: Plan, role_part: str) -> list[dict]:
    return [s for r in plan.of_type("aws:iam/rolePolicy:RolePolicy") if role_part in r.name
            for s in json.loads(r.inputs["policy"])["Statement"]]


def test_aws_nodes_may_only_read_the_secret_and_the_head_node_may_also_store_it(slurm_plan):
    plan = slurm_plan("aws-large")
    arn = plan.one(AWS_SECRET).outputs["arn"]
    for role_part, actions in (("-compute-node-role", ["secretsmanager:GetSecretValue"]),
                               ("-head-role", ["secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"])):
        secret = [s for s in _aws_statements(plan, role_part) if any(a.startswith("secretsmanager:") for a in s["Action"])]
        assert [(s["Action"], s["Resource"]) for s in secret] == [(actions, arn)]
    # The secret is encrypted with the AWS managed key (no kms_key_id): no kms:Decrypt needed, none granted. The
    # only KMS call anyone may make is the grant EC2 makes for itself when the head node starts a GPU node.
    assert "kmsKeyId" not in plan.one(AWS_SECRET).inputs
    kms = [s for s in _aws_statements(plan, "") if any(a.startswith("kms:") for a in s["Action"])]
    assert kms and all(s["Action"] == ["kms:CreateGrant"] and s["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}
                       for s in kms)
    head_profile = head_node(plan, AWS_INSTANCE).inputs["iamInstanceProfile"]
    assert head_profile == next(r for r in plan.of_type("aws:iam/instanceProfile:InstanceProfile")
                                if r.name.endswith("-head-profile")).outputs["name"]
    attached = sorted(r.inputs["policyArn"].rsplit("/", 1)[-1]
                      for r in plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment") if "-head-role-" in r.name)
    assert attached == ["CloudWatchAgentServerPolicy"]


def test_tencent_nodes_may_only_read_the_secret_through_their_instance_role(slurm_plan):
    plan = slurm_plan("tencent-large")
    roles = {r.inputs["name"]: r for r in plan.of_type("tencentcloud:Cam/role:Role")}
    policies = {r.inputs["name"]: json.loads(r.inputs["document"]) for r in plan.of_type("tencentcloud:Cam/policy:Policy")}
    resource = "qcs::ssm:ap-shanghai:uin/100000000001:secret/creatorUin/100000000001/tc-large-munge-key"
    for who, actions in (("node", ["name/ssm:GetSecretValue"]),
                         ("head", ["name/ssm:GetSecretValue", "name/ssm:PutSecretValue"])):
        trust = json.loads(roles[f"tc-large-{who}"].inputs["document"])
        assert trust["statement"][0]["principal"] == {"service": ["cvm.qcloud.com"]}
        statements = policies[f"tc-large-{who}"]["statement"]
        ssm = [s for s in statements if any(a.startswith("name/ssm:") for a in s["action"])]
        assert [(s["action"], s["resource"]) for s in ssm] == [(actions, [resource])]
        rest = [(s["action"], s["resource"]) for s in statements if s not in ssm]
        if who == "node":  # and its own Slurm boot, in the boot bucket
            assert rest == [(["name/monitor:PutMonitorData"], ["*"]),
                            (["name/cos:GetObject"], ["qcs::cos:ap-shanghai:uid/1250000000:tc-large-boot-1250000000/slurm/*"])]
        else:  # and Slurm power saving: this cluster's instances only
            assert rest[0] == (["name/monitor:PutMonitorData"], ["*"])
    assert {n.inputs["camRoleName"] for n in gpu_nodes(plan, TC_INSTANCE)} == {"tc-large-node"}
    assert head_node(plan, TC_INSTANCE).inputs["camRoleName"] == "tc-large-head"


# ---- alarms, outputs ----------------------------------------------------------------------------------

def test_aws_alarms_on_a_failed_health_check_per_node_and_on_the_head_node(slurm_plan):
    plan = slurm_plan("aws-large")
    topic = plan.one("aws:sns/topic:Topic").outputs["arn"]
    nodes = sorted(gpu_nodes(plan, AWS_INSTANCE), key=lambda r: r.name)
    health = sorted((a.inputs for a in plan.of_type(ALARM) if a.inputs.get("metricName") == "NodeHealthy"),
                    key=lambda a: a["dimensions"]["NodeName"])
    assert [a["dimensions"] for a in health] == [
        {"ClusterName": "llm-large", "NodeName": f"llm-large-node-{i}", "InstanceId": n.id} for i, n in enumerate(nodes)]
    for a in health:
        assert (a["namespace"], a["comparisonOperator"], a["threshold"], a["statistic"]) == (
            "GpuCluster", "LessThanThreshold", 1, "Minimum")
        assert a["alarmActions"] == [topic] and a["treatMissingData"] == "notBreaching"
    head = head_node(plan, AWS_INSTANCE).id
    assert [a.inputs["metricName"] for a in plan.of_type(ALARM) if a.inputs.get("dimensions") == {"InstanceId": head}] == [
        "StatusCheckFailed"]


@pytest.mark.parametrize("stack", ["aws-large", "tencent-large"])
def test_outputs_say_how_to_reach_the_head_node_and_submit_the_first_job(stack, slurm_plan):
    out = slurm_plan(stack).stack.outputs
    head = head_node(slurm_plan(stack), instance_type(stack)).id
    assert out["head_node_id"] == head and head in out["connect_head"]
    assert out["submit_job"] == "sudo sbatch /opt/gpu-cluster/jobs/nccl-allreduce.sbatch"
    if cloud(stack) == "aws":
        assert out["connect_head"] == f"aws ssm start-session --target {head} --region us-east-1"
        assert out["munge_secret"].startswith("arn:aws:secretsmanager:us-east-1:")
    else:
        assert "tccli tat RunCommand --region ap-shanghai" in out["connect_head"]
        assert out["munge_secret"] == "tc-large-munge-key"
    # The job the output names is one the head node ships.
    assert "/opt/gpu-cluster/jobs/nccl-allreduce.sbatch" in node_files(slurm_plan(stack), (head_node(slurm_plan(stack),
                                                                                     instance_type(stack))))


@pytest.mark.parametrize("stack", ["aws-entry", "tencent-entry"])
def test_the_notes_say_what_slurm_adds_and_cannot_do(stack, slurm_plan):
    from gpu_cluster.render import validate

    notes = validate(slurm_stack_with(stack)).notes
    slurm = [n for n in notes if n.startswith("scheduler: slurm")]
    assert any("-munge-key" in n and "no plan, state or user data holds it" in n for n in slurm)
    if cloud(stack) == "tencentcloud":
        assert any("MT_QCE" in n and "no alarm watches" in n for n in slurm)
    else:
        assert any("replaces the head node" in n for n in slurm)


def test_an_own_tencent_image_is_told_what_the_boot_no_longer_installs_for_it():
    """An own Tencent image (Ubuntu 24.04): the boot then installs no Fabric Manager (said in a note), and CFS Turbo
    is refused with Slurm, since its client does not install on Ubuntu 24.04; an own image without Slurm keeps the
    file system, with a note that the Turbo client may not support its kernel."""
    from components.spec import SpecError
    from conftest import stack_with
    from gpu_cluster.render import validate

    ubuntu = {"image_id": TENCENT_UBUNTU_IMAGE, "storage": {"lustre": None}}
    notes = validate(slurm_stack_with("tencent-large", ubuntu)).notes
    own = [n for n in notes if n.startswith("image_id=")]
    assert any("HCCPNV6.96XLARGE2304 has NVSwitch" in n and "nvidia-fabricmanager" in n for n in own)
    assert not any(n.startswith("image: the newest public TencentOS") for n in notes)
    with pytest.raises(SpecError) as refused:
        validate(slurm_stack_with("tencent-large", {"image_id": TENCENT_UBUNTU_IMAGE}))
    assert f"cluster.storage.lustre with scheduler: slurm and cluster.image_id={TENCENT_UBUNTU_IMAGE}" in str(refused.value)
    assert "allowed: image_id: null (TencentOS, with OpenHPC's Slurm), storage.lustre: null with Slurm, or scheduler: none" \
        in str(refused.value)
    plain = validate(stack_with("tencent-large", {"image_id": "img-u2404gpu", "scheduler": "none"})).notes
    assert any("/lustre needs Tencent's CFS Turbo client" in n and "gpu-cluster-lustre-client says why" in n
               for n in plain)
    # No file system and no NVSwitch: nothing to say.
    assert not [n for n in validate(slurm_stack_with("tencent-entry", {"image_id": TENCENT_UBUNTU_IMAGE})).notes
                if n.startswith("image_id=")]


# ---- scheduler: none ------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", [s for s in SAMPLE_STACKS if s.startswith("tencent")])
def test_tencent_samples_on_the_default_image_run_slurm_from_openhpc(stack, sample_plan):
    """TencentOS Server 3.1 gets Slurm from OpenHPC 2 (components/slurm/oses.py): every sample has a head node and
    a munge secret, and head and nodes install the same pinned release from repositories whose keys they check."""
    plan = sample_plan(stack)
    head = head_node(plan, TC_INSTANCE)
    assert plan.of_type(TC_SECRET) and head.name.endswith("-head")
    head_install = node_files(plan, head)["/usr/local/sbin/gpu-cluster-slurm-packages"]
    assert f"slurm-slurmctld-ohpc-{SLURM_RELEASE} " in head_install
    for own in node_file_sets(plan, stack):
        install = own["/usr/local/sbin/gpu-cluster-slurm-packages"]
        assert f"slurm-slurmd-ohpc-{SLURM_RELEASE} " in install
        for key in EL8_OPENHPC.keys:
            shipped = [f"file://$work/{key.shipped}"] if key.shipped else []
            assert f"trust_key {key.fingerprint} {key.path} {' '.join(shipped + list(key.urls))}\n" in install
            assert not key.shipped or f"<<'KEY'\n{key.text()}KEY\n" in install
            assert all(u.startswith("https://") for u in key.urls)
        assert "includepkgs=libjwt*" in install and "gpgcheck=1" in install and "gpgcheck=0" not in install
        assert own["/etc/systemd/system/slurmd.service.d/gpu-cluster.conf"]


def test_the_slurm_package_step_trusts_a_key_only_alone_and_with_the_pinned_fingerprint(tmp_path):
    """trust_key keeps a key file only when it holds one key and that key's fingerprint is the pinned one: another
    key, or the pinned key followed by another (dnf would trust both), is refused, and the next source is tried.
    gpg is played by tests/openpgp.py, which prints what `gpg --with-colons --show-keys` prints of a key."""
    import subprocess

    import openpgp
    from components.slurm.oses import OPENHPC_KEY, _INSTALL_SH

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/gpg").write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "tests/openpgp.py"} "$@"\n')
    (tmp_path / "bin/gpg").chmod(0o755)
    [(tag, body)] = [p for p in openpgp.packets(openpgp.dearmor(OPENHPC_KEY.text())) if p[0] == openpgp.PUBLIC_KEY]
    forged = body[:-10] + bytes([body[-10] ^ 1]) + body[-9:]  # another key: one bit of its material differs
    sources = {"pinned": OPENHPC_KEY.text(), "other": openpgp.armor(openpgp.packet(tag, forged)),
               "both": openpgp.armor(openpgp.packet(tag, body) + openpgp.packet(tag, forged))}
    for name, text in sources.items():
        (tmp_path / f"{name}.asc").write_text(text)
    assert openpgp.fingerprints(openpgp.dearmor(sources["both"]))[0] == OPENHPC_KEY.fingerprint
    function = _INSTALL_SH.split("{keys}", 1)[0]
    env = {"PATH": f"{tmp_path}/bin:/usr/bin:/bin"}
    script = ('set -euo pipefail\nNAME=t\nfail() { echo "$NAME: $*" >&2; exit 1; }\n'
              'rpm() { echo imported "$@"; }\n' + function)
    for tried, ok in ((["other", "pinned"], True), (["both"], False), (["other"], False), (["missing"], False)):
        (tmp_path / "kept.asc").unlink(missing_ok=True)
        urls = " ".join(f"file://{tmp_path}/{n}.asc" for n in tried)
        out = subprocess.run(["bash", "-c", script + f'trust_key {OPENHPC_KEY.fingerprint} "{tmp_path}/kept.asc" {urls}'],
                             env=env, capture_output=True, text=True)
        assert (out.returncode == 0) == ok, (tried, out.stderr)
        assert ((tmp_path / "kept.asc").read_text() == OPENHPC_KEY.text()) if ok else not (tmp_path / "kept.asc").exists()
        assert ok or "no copy of the signing key" in out.stderr


def test_the_shipped_signing_keys_are_the_pinned_ones():
    """A shipped key is the one its fingerprint pins, and only that key: a changed file fails here, not at boot."""
    import openpgp

    shipped = [k for k in EL8_OPENHPC.keys if k.shipped]
    assert shipped
    for key in shipped:
        assert openpgp.fingerprints(openpgp.dearmor(key.text())) == [key.fingerprint]


@pytest.mark.parametrize("stack", ["aws-large", "tencent-large", "aws-scheduled", "tencent-scheduled"])
def test_scheduler_none_renders_no_head_node_no_secret_and_no_slurm(stack):
    # Without Slurm, idle means GPU use below a threshold, which a stack with Slurm leaves out.
    idle = {"idle_stop": {"gpu_util_below_pct": 5, "for_minutes": 60}} if stack.endswith("-scheduled") else {}
    plan = render_plan(stack, {"scheduler": "none", **idle})
    kinds = {r.type for r in plan.custom()}
    assert not kinds & {AWS_SECRET, TC_SECRET, *SECRET_VALUES}
    assert [r.name for r in plan.of_type(instance_type(stack))] == [r.name for r in gpu_nodes(plan, instance_type(stack))]
    assert not [r for r in plan.custom() if "head" in r.name]
    for document in node_documents(plan, stack):
        assert "slurmd" not in load_yaml(document).get("packages", [])
        assert not [p for p in files(document) if p.startswith("/opt/gpu-cluster/") or "slurm" in p]
    assert not {"head_node_id", "head_address", "munge_secret", "connect_head", "submit_job"} & set(plan.stack.outputs)
    assert not [a for a in plan.of_type(ALARM) if a.inputs.get("metricName") == "NodeHealthy"]
    if cloud(stack) == "tencentcloud":
        assert not [r for r in plan.of_type("tencentcloud:Cam/role:Role") if not r.name.endswith("-cost-controls-role")]
        assert all("camRoleName" not in n.inputs for n in plan.of_type(TC_INSTANCE))
    else:
        assert not [r for r in plan.of_type("aws:iam/rolePolicy:RolePolicy") if "munge" in r.name]
    assert judged_violations(plan) == []


def test_scheduler_none_leaves_the_gpu_nodes_as_they_were_and_drops_the_head_node_resources():
    with_slurm, without = render_plan("aws-entry"), render_plan("aws-entry", {"scheduler": "none"})
    added = {r.name for r in with_slurm.custom()} - {r.name for r in without.custom()}
    assert added == {"ml-entry-head-munge-key", "ml-entry-head-role", "ml-entry-head-role-session-manager",
                     "ml-entry-head-role-cloudwatch", "ml-entry-head-role-munge-key", "ml-entry-head-profile",
                     "ml-entry-head-instance", "ml-entry-head-data-attachment", "ml-entry-storage-head-data",
                     "ml-entry-compute-node-role-munge-key", "ml-entry-monitoring-node-0-unhealthy",
                     "ml-entry-monitoring-head-status", "ml-entry-compute-job-role",
                     "ml-entry-compute-job-role-checkpoints", "ml-entry-compute-node-role-job-role",
                     "ml-entry-head-role-power"}
    # Without Slurm the metadata service stays open, and the node role itself reads the bucket; the default idle
    # stop is a CloudWatch alarm on GPU use (with Slurm, Slurm power saving).
    assert {r.name for r in without.custom()} - {r.name for r in with_slurm.custom()} == {
        "ml-entry-compute-node-role-checkpoints", "ml-entry-cost-controls-node-0-idle-stop"}


# ---- the pure pieces --------------------------------------------------------------------------------

def test_head_address_is_host_ten_of_the_subnet():
    assert head_address("10.40.0.0/17") == "10.40.0.10"
    assert head_address("192.168.4.0/25") == "192.168.4.10"
    assert HEAD_HOST_OFFSET == 10
    with pytest.raises(ValueError, match="too small"):
        head_address("10.0.0.0/28")


def test_user_data_is_compressed_within_the_16_kb_limit(slurm_plan):
    document = "#cloud-config\n" + "runcmd: []\n" * 4000
    encoded = encode(document)
    assert decode(encoded) == document and encode(document) == encoded  # deterministic: the same every render
    assert size_problem(encoded, "raw", "x") is None and size_problem(encoded, "base64", "x") is None
    assert "over the 16384-byte limit" in size_problem("A" * (USER_DATA_LIMIT + 4), "base64", "node x")
    for stack in SAMPLE_STACKS:
        plan = slurm_plan(stack)
        for r in plan.of_type(*BOOT_USER_DATA):
            key = BOOT_USER_DATA[r.type]
            if key in r.inputs:
                assert len(r.inputs[key]) <= USER_DATA_LIMIT * 4 // 3 + 4 and decode(r.inputs[key]).startswith(
                    "#cloud-config\n"), (stack, r.name)


def test_tencent_slurm_says_that_jobs_have_no_bucket_credentials_of_their_own():
    """The metadata guard closes the CAM role to jobs on Tencent too, and no job role exists there yet: the
    plan must say that a job reaches the checkpoint bucket only with credentials the user gives it."""
    from gpu_cluster.render import validate

    notes = validate(slurm_stack_with("tencent-large")).notes
    assert any("only root reaches the metadata service" in n and "credentials you give it" in n for n in notes)


@pytest.mark.parametrize("stack", ["tencent-large", "tencent-entry", "tencent-scheduled"])
def test_tencent_cam_roles_grant_no_action_on_every_resource_but_operation_level_ones(stack, slurm_plan, sample_plan):
    """Least privilege on Tencent Cloud (the AWS SSM-on-* finding, reviewed here): the nodes' and head node's roles
    read one secret (the head node also puts it) and publish a metric; the cost-controls function's role starts and
    stops the cluster's nodes only, and so does the head node's under Slurm power saving. "*" only for actions that
    take no resource (Cloud Monitor's data calls, DescribeInstancesStatus) and DescribeInstances, the read power-agent
    finds the nodes with by their tags; no preset policy is attached to any role."""
    operation_level = {"name/monitor:PutMonitorData", "name/monitor:GetMonitorData", "name/cvm:DescribeInstancesStatus",
                       "name/cvm:DescribeInstances"}
    plans = (slurm_plan(stack), sample_plan(stack))
    assert [r for plan in plans for r in plan.of_type("tencentcloud:Cam/policy:Policy")]
    for plan in plans:
        statements = [s for r in plan.of_type("tencentcloud:Cam/policy:Policy")
                      for s in json.loads(r.inputs["document"])["statement"]]
        for s in statements:
            actions = s["action"] if isinstance(s["action"], list) else [s["action"]]
            if s["resource"] == ["*"] or s["resource"] == "*":
                assert set(actions) <= operation_level, s
            else:
                # (the nodes' own Slurm boots: one prefix of the cluster's boot bucket)
                assert all((r.startswith(("qcs::ssm:", "qcs::cvm:")) and "*" not in r)
                           or re.fullmatch(r"qcs::cos:[a-z-]+:uid/\d+:[a-z0-9-]+-boot-\d+/slurm/\*", r)
                           for r in s["resource"]), s
        assert not [r for r in plan.of_type("tencentcloud:Cam/rolePolicyAttachment:RolePolicyAttachment")
                    if not str(r.inputs.get("policyId", "")).isdigit()]
