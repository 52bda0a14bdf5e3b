"""AWS storage and backup roles: FSx for Lustre, checkpoint bucket, data volumes, DLM, URN stability."""

import json

import pytest

from components.aws.notes import fsx_backup_days
from conftest import rendered, stack_with
from gpu_cluster.render import validate

FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
BUCKET = "aws:s3/bucket:Bucket"
VOLUME = "aws:ebs/volume:Volume"
DLM = "aws:dlm/lifecyclePolicy:LifecyclePolicy"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"


def _storage_component(plan):
    return next(r for r in plan.resources if r.type == "gpu-cluster:aws:Storage")


def test_fsx_persistent2_in_node_subnet_with_requested_size(sample_plan):
    plan = sample_plan("aws-large")
    fs = plan.one(FSX)
    node_subnet = next(r.id for r in plan.of_type("aws:ec2/subnet:Subnet") if r.name.endswith("-network-subnet"))
    assert fs.protect
    assert fs.inputs["subnetIds"] == node_subnet
    assert fs.inputs["storageCapacity"] == 4800 and fs.inputs["perUnitStorageThroughput"] == 500
    assert fs.inputs["deploymentType"] == "PERSISTENT_2"
    assert fs.inputs["dataCompressionType"] == "LZ4"
    assert fs.inputs["rootSquashConfiguration"] == {"rootSquash": "0:0"}
    assert fs.inputs["automaticBackupRetentionDays"] == 14
    # Its own security group, open on the Lustre ports to the node group (and itself) only.
    (fs_sg,) = fs.inputs["securityGroupIds"]
    node_sg = next(r.id for r in plan.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name.endswith("-network-nodes"))
    rules = [r.inputs for r in plan.of_type(INGRESS) if r.inputs["securityGroupId"] == fs_sg]
    assert {(r["referencedSecurityGroupId"], r["ipProtocol"], r["fromPort"], r["toPort"]) for r in rules} == {
        (src, "tcp", lo, hi) for src in (node_sg, fs_sg) for lo, hi in ((988, 988), (1018, 1023))}
    # The nodes mount it: the launch template's cloud-init names the FSx DNS and mount name.
    assert not plan.of_type(DRA)


def test_data_repository_association_when_import_path_is_set(sample_plan):
    plan = sample_plan("aws-mid")
    dra = plan.one(DRA).inputs
    assert dra["fileSystemId"] == plan.one(FSX).id
    assert dra["dataRepositoryPath"] == "s3://ft-mid-datasets/corpora/"
    assert dra["fileSystemPath"].startswith("/")


def test_checkpoint_bucket_private_versioned_encrypted_with_lifecycle(sample_plan):
    plan = sample_plan("aws-large")
    bucket = plan.one(BUCKET)
    assert bucket.protect
    of = lambda t: [r.inputs for r in plan.of_type(t) if r.inputs["bucket"] == bucket.id]  # noqa: E731
    (block,) = of("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert all(block[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                          "restrictPublicBuckets"))
    (versioning,) = of("aws:s3/bucketVersioning:BucketVersioning")
    assert versioning["versioningConfiguration"]["status"] == "Enabled"
    (sse,) = of("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert sse["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] in ("AES256", "aws:kms")
    (lifecycle,) = of("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    rules = lifecycle["rules"]
    assert all(r["status"] == "Enabled" for r in rules)
    assert [r["abortIncompleteMultipartUpload"]["daysAfterInitiation"] for r in rules
            if "abortIncompleteMultipartUpload" in r] == [7]
    assert [r["noncurrentVersionExpiration"]["noncurrentDays"] for r in rules
            if "noncurrentVersionExpiration" in r] == [30]
    (policy,) = of("aws:s3/bucketPolicy:BucketPolicy")
    assert json.loads(policy["policy"])["Statement"][0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_data_volumes_are_protected_encrypted_and_snapshotted(sample_plan):
    plan = sample_plan("aws-large")
    volumes = plan.of_type(VOLUME)
    # One per GPU node and the Slurm head node's state volume (components/headnode.py HEAD_DATA_GB).
    assert sorted((v.name, v.inputs["size"]) for v in volumes) == [
        ("llm-large-storage-data-0", 1000), ("llm-large-storage-data-1", 1000), ("llm-large-storage-head-data", 20)]
    for v in volumes:
        assert v.protect
        assert v.inputs["encrypted"] is True and v.inputs["type"] == "gp3"
        assert v.inputs["availabilityZone"] == "us-east-1a"
    attachments = plan.of_type("aws:ec2/volumeAttachment:VolumeAttachment")
    node_ids = {r.id for r in plan.of_type("aws:ec2/instance:Instance")}
    assert {a.inputs["volumeId"] for a in attachments} == {v.id for v in volumes}
    assert {a.inputs["instanceId"] for a in attachments} == node_ids

    policy = plan.one(DLM).inputs
    details = policy["policyDetails"]
    assert details["resourceTypes"] == ["VOLUME"]
    for v in volumes:  # the policy's target tags select every data volume
        assert details["targetTags"].items() <= v.inputs["tags"].items()
    (schedule,) = details["schedules"]
    assert schedule["createRule"]["interval"] == 6 and schedule["createRule"]["intervalUnit"] == "HOURS"
    # Same start hours as the Tencent schedule for the same spec: 00, 06, 12, 18.
    assert schedule["createRule"]["times"] == "00:00"
    assert schedule["retainRule"]["count"] == 14
    role = next(r for r in plan.of_type("aws:iam/role:Role") if r.outputs["arn"] == policy["executionRoleArn"])
    assert json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Principal"] == {"Service": "dlm.amazonaws.com"}


def test_no_data_volumes_no_dlm_policy(render_cluster):
    plan = render_cluster("aws-entry", {"storage": {"data_disk_gb": 0}, "scheduler": "none"})
    assert not plan.of_type(VOLUME) and not plan.of_type(DLM)
    # With Slurm the head node's state volume is still snapshotted.
    plan = render_cluster("aws-entry", {"storage": {"data_disk_gb": 0}})
    (volume,) = plan.of_type(VOLUME)
    assert volume.name == "ml-entry-storage-head-data"
    assert plan.one(DLM).inputs["policyDetails"]["targetTags"].items() <= volume.inputs["tags"].items()


def test_fsx_backup_retention_is_capped_and_reported(render_cluster):
    capped = validate(stack_with("aws-large", {"snapshots": {"retain": 120}}))
    assert fsx_backup_days(capped.spec) == 90
    assert any("120" in n and "at most 90 days" in n for n in capped.notes)
    plan = render_cluster("aws-large", {"snapshots": {"retain": 120}})
    assert plan.one(FSX).inputs["automaticBackupRetentionDays"] == 90
    assert plan.one(DLM).inputs["policyDetails"]["schedules"][0]["retainRule"]["count"] == 120


def test_a_file_system_linked_to_s3_has_no_backups_and_the_plan_says_why(sample_plan):
    """FSx backs up only persistent file systems not linked to S3 (FSx for Lustre user guide, "Working
    with backups"): asking for backups next to a data repository association would fail CreateBackup."""
    plan = sample_plan("aws-mid")
    assert plan.of_type(DRA) and plan.one(FSX).inputs["automaticBackupRetentionDays"] == 0
    assert "dailyAutomaticBackupStartTime" not in plan.one(FSX).inputs
    cluster = validate(stack_with("aws-mid"))
    assert any("cannot back up a file system linked to S3" in n for n in cluster.notes)


def test_the_file_system_waits_for_every_lustre_rule():
    """CreateFileSystem fails with InvalidNetworkSettings when the port-988 rules land after it
    (aws/aws-parallelcluster issue 6181): the file system depends on each of them."""
    regs = rendered(stack_with("aws-large")).registrations
    fs = next(r for r in regs if r.type == FSX)
    rules = [r.urn for r in regs if r.type in (INGRESS, "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
             and "-lustre-" in r.name]
    assert len(rules) == 10  # 2 port ranges × (in, out) × (self, nodes) + 2 client-side rules
    assert set(rules) <= set(fs.dependencies)


def test_stateful_urns_survive_type_and_node_count_changes(sample_plan, render_cluster):
    before = sample_plan("aws-large")
    after = render_cluster("aws-large", {"instance_type": "p5en.48xlarge", "nodes": 4})
    assert len(after.one("aws:ec2/launchTemplate:LaunchTemplate").inputs["networkInterfaces"]) == 16

    def stateful(plan):
        return {r.urn: r for r in plan.resources if r.type in (FSX, BUCKET, VOLUME)}

    old, new = stateful(before), stateful(after)
    assert len(old) == 5 and len(new) == 7  # FSx, bucket, the head node's state volume, 2 → 4 data volumes
    assert set(old) <= set(new)
    assert all(r.protect for r in new.values())


@pytest.mark.parametrize("changes", [
    {"purchase": "mixed", "criticality": "standard"},
    {"tier": "mid", "instance_type": "p4d.24xlarge", "nodes": 2},
])
def test_stateful_urns_survive_purchase_and_tier_changes(sample_plan, render_cluster, changes):
    def stateful(plan):
        return {r.urn for r in plan.resources if r.type in (FSX, BUCKET, VOLUME) and r.protect}

    assert stateful(render_cluster("aws-large", changes)) == stateful(sample_plan("aws-large"))


def test_the_data_repository_association_waits_longer_than_the_providers_ten_minutes():
    """Its metadata import at create grows with the bucket; the provider's default create wait is 10 min
    (fsx_data_repository_association.html.markdown, Timeouts), after which `pulumi up` fails."""
    from conftest import rendered, stack_with

    from components.aws.storage import DRA_CREATE_TIMEOUT

    regs = rendered(stack_with("aws-mid")).registrations  # aws-mid links s3://ft-mid-datasets/corpora/
    [dra] = [r for r in regs if r.type == DRA]
    assert dra.custom_timeouts == {"create": DRA_CREATE_TIMEOUT} == {"create": "2h"}
    assert not [r.name for r in regs if r.custom_timeouts and r.type != DRA], "no other wait is changed"
