"""Tencent storage and backup: CFS Turbo, COS checkpoint bucket, CBS data disks, snapshots, URN stability."""

import ipaddress

import pytest

from components import catalog
from conftest import TENCENT_UBUNTU_IMAGE, gpu_nodes, head_node, inputs_of

CFS = "tencentcloud:Cfs/fileSystem:FileSystem"
BUCKET = "tencentcloud:Cos/bucket:Bucket"
DISK = "tencentcloud:Cbs/storage:Storage"
INSTANCE = "tencentcloud:Instance/instance:Instance"
POLICY = "tencentcloud:Cbs/snapshotPolicy:SnapshotPolicy"
POLICY_ATTACH = "tencentcloud:Cbs/snapshotPolicyAttachment:SnapshotPolicyAttachment"


def test_turbo_file_system_on_a_ccn_with_allowed_capacity(sample_plan):
    for stack, kind in (("tencent-large", "TB"), ("tencent-mid", "TP")):
        plan = sample_plan(stack)
        fs = plan.one(CFS)
        row = catalog.limit("tencentcloud", "cfs_turbo")[kind]
        cap = fs.inputs["capacity"]
        assert fs.inputs["protocol"] == "TURBO" and fs.inputs["storageType"] == kind
        assert cap >= row["min_gib"] and (cap - row["min_gib"]) % row["step_gib"] == 0
        assert fs.inputs["netInterface"] == "CCN"
        ccn = plan.one("tencentcloud:Ccn/instance:Instance")
        assert fs.inputs["ccnId"] == ccn.id
        attach = plan.one("tencentcloud:Ccn/attachmentV2:AttachmentV2").inputs
        assert attach == {"ccnId": ccn.id, "instanceId": plan.one("tencentcloud:Vpc/instance:Instance").id,
                          "instanceRegion": "ap-shanghai", "instanceType": "VPC"}
        # CFS's default permission group, as the CreateCfsFileSystem API asks of Turbo; no group of our own.
        assert fs.inputs["accessGroupId"] == "pgroupbasic"
        assert not plan.of_type("tencentcloud:Cfs/accessGroup:AccessGroup")
        assert not plan.of_type("tencentcloud:Cfs/accessRule:AccessRule")
        assert fs.protect and fs.inputs["tags"]["gpu-cluster:name"] == fs.name.removesuffix("-lustre")


def test_turbo_range_sits_outside_the_vpc_and_only_the_clusters_ccn_reaches_it(sample_plan):
    plan = sample_plan("tencent-large")
    assert plan.one(CFS).inputs["cidrBlock"] == "10.51.0.0/24"
    vpc = plan.one("tencentcloud:Vpc/instance:Instance")
    assert not ipaddress.ip_network("10.51.0.0/24").overlaps(ipaddress.ip_network(vpc.inputs["cidrBlock"]))
    # The CCN Turbo sits on holds the cluster's VPC and nothing else.
    assert [a.inputs["instanceId"] for a in plan.of_type("tencentcloud:Ccn/attachmentV2:AttachmentV2")] == [vpc.id]


def test_no_lustre_no_file_system(sample_plan):
    plan = sample_plan("tencent-entry")
    assert plan.of_type(CFS) == [] and plan.of_type("tencentcloud:Ccn/instance:Instance") == []


def test_checkpoint_bucket_is_private_versioned_encrypted_with_lifecycle(sample_plan):
    [bucket] = [b for b in sample_plan("tencent-entry").of_type(BUCKET) if b.name.endswith("-checkpoints")]
    i = bucket.inputs
    assert i["bucket"] == "tc-entry-checkpoints-1250000000"
    assert i["acl"] == "private" and i["versioningEnable"] is True and i["encryptionAlgorithm"] == "AES256"
    rules = {r["id"]: r for r in i["lifecycleRules"]}
    assert rules["abort-incomplete-uploads"]["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 7}
    assert rules["expire-old-versions"]["nonCurrentExpiration"] == {"nonCurrentDays": 30}
    assert bucket.protect


def test_one_encrypted_protected_data_disk_per_node_attached_to_it(slurm_plan):
    plan = slurm_plan("tencent-large")
    disks = sorted(plan.of_type(DISK), key=lambda r: r.name)
    # One per GPU node, and the Slurm head node's state disk (components/headnode.py HEAD_DATA_GB).
    assert [(d.name, d.inputs["storageSize"]) for d in disks] == [
        ("tc-large-data-0", 2000), ("tc-large-data-1", 2000), ("tc-large-head-data", 20)]
    for d in disks:
        assert d.protect and d.inputs["encrypt"] is True
        assert d.inputs["availabilityZone"] == "ap-shanghai-5"
    nodes = sorted(gpu_nodes(plan, INSTANCE), key=lambda r: r.name) + [head_node(plan, INSTANCE)]
    attached = {(a["storageId"], a["instanceId"])
                for a in inputs_of(plan, "tencentcloud:Cbs/storageAttachment:StorageAttachment")}
    assert attached == {(d.id, n.id) for d, n in zip(disks, nodes)}


def test_snapshot_policy_covers_every_data_disk_with_spec_hours_and_retention(sample_plan):
    for stack, hours, retain in (("tencent-large", [0, 6, 12, 18], 14), ("tencent-entry", [0], 7)):
        plan = sample_plan(stack)
        policy = plan.one(POLICY)
        assert policy.inputs["repeatHours"] == hours
        assert policy.inputs["repeatWeekdays"] == [0, 1, 2, 3, 4, 5, 6]
        assert policy.inputs["retentionDays"] == retain
        attached = {a["storageId"] for a in inputs_of(plan, POLICY_ATTACH)}
        assert attached == {d.id for d in plan.of_type(DISK)}
        assert all(a["snapshotPolicyId"] == policy.id for a in inputs_of(plan, POLICY_ATTACH))


def test_file_system_auto_snapshots(sample_plan):
    plan = sample_plan("tencent-large")
    policy = plan.one("tencentcloud:Cfs/autoSnapshotPolicy:AutoSnapshotPolicy")
    assert policy.inputs["hour"] == "0,6,12,18" and policy.inputs["aliveDays"] == 14
    attach = plan.one("tencentcloud:Cfs/autoSnapshotPolicyAttachment:AutoSnapshotPolicyAttachment").inputs
    assert attach == {"autoSnapshotPolicyId": policy.id, "fileSystemIds": plan.one(CFS).id}


def test_no_data_disks_no_cbs_policy(render_cluster):
    plan = render_cluster("tencent-entry", {"storage": {"data_disk_gb": 0}, "scheduler": "none"})
    assert plan.of_type(DISK) == [] and plan.of_type(POLICY) == [] and plan.of_type(POLICY_ATTACH) == []
    # With Slurm the head node's state disk is still snapshotted.
    plan = render_cluster("tencent-entry", {"storage": {"data_disk_gb": 0}, "scheduler": "slurm",
                                            "image_id": TENCENT_UBUNTU_IMAGE})
    (disk,) = plan.of_type(DISK)
    assert disk.name == "tc-entry-head-data"
    assert [a["storageId"] for a in inputs_of(plan, POLICY_ATTACH)] == [disk.id]


def test_stateful_urns_survive_instance_type_and_node_count_changes(sample_plan, render_cluster):
    before = sample_plan("tencent-mid")
    after = render_cluster("tencent-mid", {"instance_type": "GT4.20XLARGE474", "nodes": 4,
                                           "purchase": "mixed", "storage": {"scratch": "none"}})
    changed = render_cluster("tencent-entry", {"instance_type": "PNV4.7XLARGE116", "zone": "ap-guangzhou-7",
                                               "nodes": 2})
    for old, new in ((before, after), (sample_plan("tencent-entry"), changed)):
        stateful = lambda plan: {r.urn: r for r in plan if r.type in (CFS, BUCKET, DISK)}
        old_s, new_s = stateful(old), stateful(new)
        assert set(old_s) <= set(new_s)
        assert all(r.protect for r in new_s.values())
    assert len([u for u in stateful(after) if "Cbs/storage:Storage" in u]) == 5  # 4 data disks and the head node's
    assert set(stateful(before)) - set(stateful(after)) == set()


@pytest.mark.parametrize("changes", [
    {"purchase": "mixed", "criticality": "standard"},
    {"tier": "mid", "instance_type": "GT4.20XLARGE474", "nodes": 2},
])
def test_stateful_urns_survive_purchase_and_tier_changes(sample_plan, render_cluster, changes):
    stateful_types = ("tencentcloud:Cfs/fileSystem:FileSystem", "tencentcloud:Cos/bucket:Bucket",
                      "tencentcloud:Cbs/storage:Storage")

    def stateful(plan):
        return {r.urn for r in plan.resources if r.type in stateful_types and r.protect}

    assert stateful(render_cluster("tencent-large", changes)) == stateful(sample_plan("tencent-large"))


def test_a_turbo_file_system_without_a_mount_point_stops_the_deployment(sample_plan):
    """Read sets mount_ip and fs_id only from DescribeMountTargets' first result: with none, every node
    would boot with a /lustre source that never mounts, so the deployment stops and says why."""
    import pulumi

    from components.tencentcloud.storage import turbo_source

    fs = sample_plan("tencent-large").one(CFS)
    assert turbo_source(fs.id, fs.outputs["mountIp"], fs.outputs["fsId"]) == (
        f"{fs.outputs['mountIp']}@tcp0:/{fs.outputs['fsId']}/cfs")
    for ip, fs_id in (("", "abcd1234"), ("10.51.0.12", ""), (None, None)):
        # `pulumi up` alone never reads it again (no refresh): the sentence says how to get past it.
        with pytest.raises(pulumi.RunError, match=f"CFS Turbo {fs.id} has no mount point yet.*`pulumi up --refresh`"):
            turbo_source(fs.id, ip, fs_id)


def test_disks_are_second_generation_encrypted_and_the_plan_names_the_kms_role(sample_plan):
    """The two generations are incompatible and the first runs only on some older shapes (CreateDisks
    EncryptType); encrypted disks need the CVM_QcsRole role with QcloudKMSAccessForCVMRole."""
    from gpu_cluster.render import read_stack_file, stack_path, validate

    disks = sample_plan("tencent-large").of_type(DISK)
    assert disks and all(d.inputs["encrypt"] is True and d.inputs["encryptType"] == "ENCRYPT_V2" for d in disks)
    notes = validate(read_stack_file(stack_path("tencent-large"))).notes
    [setup] = [n for n in notes if n.startswith("one-time account setup")]
    assert "CVM_QcsRole" in setup and "QcloudKMSAccessForCVMRole" in setup
    assert any(n.startswith("budget: it counts only costs tagged gpu-cluster:name=tc-large") and
               "cost allocation tag" in n for n in notes)
