"""Adversarial mutations of rendered plans: what a real program could add or change, and the exact
(policy, resource) set the pack must report — nothing missed, nothing extra.

Each mutation starts from the mocked render of a sample stack (aws-large or tencent-large), changes it
the way a program could (an EKS node group, a fleet, an ACL, a bucket policy…) and names the violations
it must cause; the benign ones (expect nothing) guard against false alarms. Every mutation is judged with
resolved ids and in its first-preview form (ids unknown, references in propertyDependencies).
"""

from __future__ import annotations

import json
from typing import Callable

import pytest

from gpu_cluster.plan import Plan
from policy_fixtures import judged_violations
from policy_fixtures import FORMS, copied, preview_form
from policy_fixtures import sample_doc as doc_of


def find(doc: dict, name: str, kind: str = "") -> dict:
    found = [r for r in doc["deployment"]["resources"] if r["urn"].rsplit("::", 1)[-1] == name and kind in r["type"]]
    assert len(found) == 1, (name, kind, len(found))
    return found[0]


def rid(doc: dict, name: str, kind: str = "") -> str:
    return find(doc, name, kind)["id"]


def add(doc: dict, type_: str, name: str, inputs: dict, protect: bool = False, rid_: str = "", **extra) -> dict:
    resources = doc["deployment"]["resources"]
    stack = resources[0]["urn"]
    cloud = type_.split(":", 1)[0]
    provider = next(r for r in resources if r["type"] == f"pulumi:providers:{cloud}")
    prefix = stack.split("::pulumi:pulumi:Stack::")[0]
    res = {"urn": f"{prefix}::{type_}::{name}", "custom": True, "type": type_, "id": rid_ or f"{name}-id",
           "inputs": inputs, "outputs": {}, "parent": stack, "protect": protect, "dependencies": [],
           "provider": f"{provider['urn']}::{provider['id']}", **extra}
    resources.append(res)
    return res


def remove(doc: dict, name: str, kind: str = "") -> None:
    doc["deployment"]["resources"].remove(find(doc, name, kind))


A_TAGS = {"gpu-cluster:name": "llm-large", "gpu-cluster:tier": "large", "gpu-cluster:criticality": "critical"}
SIDE = {"gpu-cluster:name": "side", "gpu-cluster:tier": "small", "gpu-cluster:criticality": "experimental"}
T_TAGS = {"gpu-cluster:name": "tc-large", "gpu-cluster:tier": "large", "gpu-cluster:criticality": "critical"}
LT, SUBNET, PUB, SG = ("llm-large-compute-launch-template", "llm-large-network-subnet", "llm-large-network-public",
                       "llm-large-network-nodes")
N0, N1 = "llm-large-compute-node-0", "llm-large-compute-node-1"
TN0, TN1, TSUB = "tc-large-node-0", "tc-large-node-1", "tc-large-subnet"
Mutation = tuple[str, str, Callable[[dict], None], set]
MUTATIONS: list[Mutation] = []


def mutation(stack: str, *expect: tuple[str, str]):
    def register(fn: Callable[[dict], None]):
        MUTATIONS.append((fn.__name__, stack, fn, set(expect)))
        return fn
    return register


def sg_ingress(doc, name, cidr4=None, cidr6=None, port=22, proto="tcp", group=SG):
    inputs = {"securityGroupId": rid(doc, group, "securityGroup:"), "ipProtocol": proto, "fromPort": port, "toPort": port}
    if cidr4:
        inputs["cidrIpv4"] = cidr4
    if cidr6:
        inputs["cidrIpv6"] = cidr6
    return add(doc, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", name, inputs)


def lt_spot(doc):
    find(doc, LT)["inputs"]["instanceMarketOptions"] = {"marketType": "spot"}


# ---- AWS: new kinds of GPU capacity ---------------------------------------------------------------

@mutation("aws-large", ("dedicated-subnet", "side-ng"))
def eks_node_group_in_an_outside_subnet(doc):
    add(doc, "aws:eks/nodeGroup:NodeGroup", "side-ng", {"clusterName": "side", "instanceTypes": ["g5.12xlarge"],
        "subnetIds": ["subnet-0123456789abcdef0"], "scalingConfig": {"desiredSize": 1, "minSize": 1, "maxSize": 1},
        "nodeRoleArn": "arn:aws:iam::123456789012:role/side", "tags": SIDE})


@mutation("aws-large", ("dedicated-subnet", "side-ng"))
def eks_node_group_of_another_cluster_in_the_gpu_subnet(doc):
    add(doc, "aws:eks/nodeGroup:NodeGroup", "side-ng", {"clusterName": "side", "instanceTypes": ["g5.12xlarge"],
        "subnetIds": [rid(doc, SUBNET)], "scalingConfig": {"desiredSize": 1, "minSize": 1, "maxSize": 1},
        "nodeRoleArn": "arn:aws:iam::123456789012:role/side", "tags": SIDE})


@mutation("aws-large", ("no-spot-only-critical", N0))
def eks_spot_node_group_and_spot_instances(doc):
    lt_spot(doc)
    add(doc, "aws:eks/nodeGroup:NodeGroup", "llm-ng", {"clusterName": "llm", "capacityType": "SPOT",
        "launchTemplate": {"id": rid(doc, LT), "version": "1"}, "subnetIds": [rid(doc, SUBNET)],
        "scalingConfig": {"desiredSize": 2, "minSize": 2, "maxSize": 2}, "nodeRoleArn": "arn:aws:iam::1:role/x", "tags": A_TAGS})


@mutation("aws-large")
def eks_on_demand_node_group_keeps_a_spot_cluster_safe(doc):
    lt_spot(doc)
    add(doc, "aws:eks/nodeGroup:NodeGroup", "llm-ng", {"clusterName": "llm", "capacityType": "ON_DEMAND",
        "launchTemplate": {"id": rid(doc, LT), "version": "1"}, "subnetIds": [rid(doc, SUBNET)],
        "scalingConfig": {"desiredSize": 1, "minSize": 1, "maxSize": 1}, "nodeRoleArn": "arn:aws:iam::1:role/x", "tags": A_TAGS})


@mutation("aws-large", ("no-spot-only-critical", N0))
def fleet_of_spot_and_spot_instances(doc):
    lt_spot(doc)
    add(doc, "aws:ec2/fleet:Fleet", "llm-fleet", {"type": "instant", "launchTemplateConfigs": [
        {"launchTemplateSpecification": {"launchTemplateId": rid(doc, LT), "version": "$Latest"}}],
        "targetCapacitySpecification": {"defaultTargetCapacityType": "spot", "totalTargetCapacity": 4}, "tags": A_TAGS})


@mutation("aws-large", ("imdsv2-required", "llm-sfr"), ("rdma-enabled", "llm-sfr"), ("placement-required", "llm-sfr"))
def spot_fleet_with_launch_specifications(doc):
    add(doc, "aws:ec2/spotFleetRequest:SpotFleetRequest", "llm-sfr", {"iamFleetRole": "arn:aws:iam::1:role/f",
        "targetCapacity": 2, "launchSpecifications": [{"ami": "ami-1", "instanceType": "g5.12xlarge",
                                                       "subnetId": rid(doc, SUBNET)}], "tags": A_TAGS})


@mutation("aws-large", ("dedicated-subnet", "llm-fleet"))
def fleet_override_in_an_outside_subnet(doc):
    add(doc, "aws:ec2/fleet:Fleet", "llm-fleet", {"type": "maintain", "launchTemplateConfigs": [
        {"launchTemplateSpecification": {"launchTemplateId": rid(doc, LT), "version": "$Latest"},
         "overrides": [{"instanceType": "p5.48xlarge", "subnetId": "subnet-0123456789abcdef0"}]}],
        "targetCapacitySpecification": {"defaultTargetCapacityType": "on-demand", "totalTargetCapacity": 1}, "tags": A_TAGS})


@mutation("aws-large", ("dedicated-subnet", "web-asg"), ("storage-encrypted", "web-asg"))
def web_autoscaling_group_in_the_gpu_subnet(doc):
    # web-lt declares no root volume: the group's machines copy the AMI's snapshot, encrypted or not
    add(doc, "aws:ec2/launchTemplate:LaunchTemplate", "web-lt", {"instanceType": "t3.large",
        "metadataOptions": {"httpTokens": "required"}}, rid_="lt-0web")
    add(doc, "aws:autoscaling/group:Group", "web-asg", {"launchTemplate": {"id": "lt-0web", "version": "$Latest"},
        "vpcZoneIdentifiers": [rid(doc, SUBNET)], "minSize": 2, "maxSize": 4, "tags": [{"key": "team", "value": "web", "propagateAtLaunch": True}]})


@mutation("aws-large", ("imdsv2-required", "llm-lc"), ("placement-required", "llm-asg"))
def launch_configuration_group_without_imdsv2_or_placement(doc):
    add(doc, "aws:ec2/launchConfiguration:LaunchConfiguration", "llm-lc", {"name": "llm-lc-1", "imageId": "ami-1",
        "instanceType": "g5.2xlarge"}, rid_="llm-lc-1")
    add(doc, "aws:autoscaling/group:Group", "llm-asg", {"launchConfiguration": "llm-lc-1", "minSize": 2, "maxSize": 2,
        "vpcZoneIdentifiers": [rid(doc, SUBNET)],
        "tags": [{"key": k, "value": v, "propagateAtLaunch": True} for k, v in A_TAGS.items()]})


@mutation("aws-large", ("no-spot-only-critical", N0))
def mixed_instances_group_all_spot_and_spot_instances(doc):
    lt_spot(doc)
    add(doc, "aws:autoscaling/group:Group", "llm-asg", {"minSize": 2, "maxSize": 2, "vpcZoneIdentifiers": [rid(doc, SUBNET)],
        "mixedInstancesPolicy": {"launchTemplate": {"launchTemplateSpecification": {"launchTemplateId": rid(doc, LT)},
                                                    "overrides": [{"instanceType": "p5.48xlarge"}]},
                                 "instancesDistribution": {"onDemandBaseCapacity": 0, "onDemandPercentageAboveBaseCapacity": 0}},
        "tags": [{"key": k, "value": v, "propagateAtLaunch": True} for k, v in A_TAGS.items()]})


# ---- AWS: public addresses ------------------------------------------------------------------------

@mutation("aws-large", ("no-public-ip", N0))
def node_asks_for_a_public_ip(doc):
    find(doc, N0)["inputs"]["associatePublicIpAddress"] = True


@mutation("aws-large", ("no-public-ip", LT))
def template_primary_interface_public(doc):
    find(doc, LT)["inputs"]["networkInterfaces"][0]["associatePublicIpAddress"] = "true"


@mutation("aws-large", ("no-public-ip", SUBNET))
def gpu_subnet_maps_public_ips(doc):
    find(doc, SUBNET)["inputs"]["mapPublicIpOnLaunch"] = True


@mutation("aws-large", ("no-public-ip", "node-0-ip"))
def eip_on_a_node(doc):
    add(doc, "aws:ec2/eip:Eip", "node-0-ip", {"domain": "vpc", "instance": rid(doc, N0)})


@mutation("aws-large", ("no-public-ip", "node-1-ip-assoc"))
def eip_association_to_a_node(doc):
    add(doc, "aws:ec2/eip:Eip", "node-1-ip", {"domain": "vpc"}, rid_="eipalloc-1")
    add(doc, "aws:ec2/eipAssociation:EipAssociation", "node-1-ip-assoc", {"allocationId": "eipalloc-1",
                                                                          "instanceId": rid(doc, N1)})


@mutation("aws-large")
def public_bastion_outside_the_gpu_subnet(doc):
    add(doc, "aws:ec2/instance:Instance", "bastion", {"instanceType": "t3.micro", "subnetId": rid(doc, PUB),
        "associatePublicIpAddress": True, "metadataOptions": {"httpTokens": "required"},
        "rootBlockDevice": {"encrypted": True}, "tags": {"team": "ops"}})


# ---- AWS: administrative ports -------------------------------------------------------------------

@mutation("aws-large", ("no-public-ssh", SG))
def inline_ssh_from_two_halves(doc):
    find(doc, SG, "securityGroup:")["inputs"]["ingress"] = [
        {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/1", "128.0.0.0/1"]}]


@mutation("aws-large", ("no-public-ssh", "rdp-v6"))
def rdp_from_all_of_ipv6(doc):
    sg_ingress(doc, "rdp-v6", cidr6="::/0", port=3389)


@mutation("aws-large", ("no-public-ssh", "ssh-low"), ("no-public-ssh", "ssh-high"))
def ssh_split_over_two_rules(doc):
    sg_ingress(doc, "ssh-low", cidr4="0.0.0.0/1")
    sg_ingress(doc, "ssh-high", cidr4="128.0.0.0/1")


@mutation("aws-large")
def https_from_anywhere(doc):
    sg_ingress(doc, "https", cidr4="0.0.0.0/0", port=443)


@mutation("aws-large")
def ssh_from_the_office(doc):
    sg_ingress(doc, "ssh-office", cidr4="203.0.113.0/24")


@mutation("aws-large", ("no-public-ssh", "pg-open"))
def postgres_from_anywhere(doc):
    sg_ingress(doc, "pg-open", cidr4="0.0.0.0/0", port=5432)


@mutation("aws-large", ("no-public-ssh", "all-open"))
def all_traffic_rule_from_anywhere(doc):
    add(doc, "aws:ec2/securityGroupRule:SecurityGroupRule", "all-open", {"type": "ingress", "protocol": "-1",
        "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"], "securityGroupId": rid(doc, SG, "securityGroup:")})


@mutation("aws-large", ("no-public-ssh", "nodes-acl"))
def network_acl_allows_ssh(doc):
    add(doc, "aws:ec2/networkAcl:NetworkAcl", "nodes-acl", {"vpcId": rid(doc, "llm-large-network-vpc"),
        "subnetIds": [rid(doc, SUBNET)], "ingress": [
            {"ruleNo": 100, "action": "allow", "protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlock": "0.0.0.0/0"}]})


@mutation("aws-large")
def network_acl_denies_before_allowing(doc):
    add(doc, "aws:ec2/networkAcl:NetworkAcl", "nodes-acl", {"vpcId": rid(doc, "llm-large-network-vpc"), "ingress": [
        {"ruleNo": 90, "action": "deny", "protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlock": "0.0.0.0/0"},
        {"ruleNo": 100, "action": "allow", "protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlock": "0.0.0.0/0"}]})


@mutation("aws-large", ("no-public-ssh", "acl-rdp"))
def network_acl_rule_allows_rdp_over_ipv6(doc):
    acl = add(doc, "aws:ec2/networkAcl:NetworkAcl", "nodes-acl", {"vpcId": rid(doc, "llm-large-network-vpc")}, rid_="acl-1")
    add(doc, "aws:ec2/networkAclRule:NetworkAclRule", "acl-rdp", {"networkAclId": acl["id"], "ruleNumber": 100,
        "egress": False, "protocol": "tcp", "ruleAction": "allow", "fromPort": 3389, "toPort": 3389, "ipv6CidrBlock": "::/0"})


@mutation("aws-large", ("no-public-ssh", "side-ng"))
def eks_node_group_with_ssh_key_and_no_source_groups(doc):
    add(doc, "aws:ec2/subnet:Subnet", "side-subnet", {"vpcId": rid(doc, "llm-large-network-vpc"), "cidrBlock": "10.40.64.0/20",
        "availabilityZone": "us-east-1a", "tags": SIDE}, rid_="subnet-side")
    add(doc, "aws:eks/nodeGroup:NodeGroup", "side-ng", {"clusterName": "side", "instanceTypes": ["t3.large"],
        "subnetIds": ["subnet-side"], "scalingConfig": {"desiredSize": 1, "minSize": 1, "maxSize": 1},
        "nodeRoleArn": "arn:aws:iam::1:role/x", "remoteAccess": {"ec2SshKey": "ops"}, "tags": SIDE})


# ---- AWS: storage ----------------------------------------------------------------------------------

@mutation("aws-large", ("storage-encrypted", N0))
def node_root_disk_unencrypted(doc):
    find(doc, N0)["inputs"]["rootBlockDevice"]["encrypted"] = False


@mutation("aws-large")
def node_root_disk_unencrypted_under_encryption_by_default(doc):
    find(doc, N0)["inputs"]["rootBlockDevice"]["encrypted"] = False
    add(doc, "aws:ebs/encryptionByDefault:EncryptionByDefault", "ebs-default", {"enabled": True})


@mutation("aws-large", ("storage-encrypted", "llm-large-storage-data-0"))
def data_volume_unencrypted(doc):
    find(doc, "llm-large-storage-data-0")["inputs"]["encrypted"] = False


@mutation("aws-large")
def data_volume_unencrypted_under_encryption_by_default(doc):
    find(doc, "llm-large-storage-data-0")["inputs"]["encrypted"] = False
    add(doc, "aws:ebs/encryptionByDefault:EncryptionByDefault", "ebs-default", {})


def backup_plan(doc, **selection):
    add(doc, "aws:backup/plan:Plan", "llm-backup", {"name": "llm", "rules": [
        {"ruleName": "daily", "targetVaultName": "llm", "schedule": "cron(0 5 * * ? *)"}]}, rid_="plan-1")
    add(doc, "aws:backup/selection:Selection", "llm-backup-selection", {"name": "llm", "planId": "plan-1",
        "iamRoleArn": "arn:aws:iam::1:role/backup", **selection})


@mutation("aws-large")
def aws_backup_instead_of_dlm(doc):
    remove(doc, "llm-large-backup-snapshots")
    backup_plan(doc, resources=[rid(doc, "llm-large-storage-data-0"), rid(doc, "llm-large-storage-data-1"),
                                rid(doc, "llm-large-storage-head-data")])


@mutation("aws-large", ("snapshot-schedule", "llm-large-storage-data-0"), ("snapshot-schedule", "llm-large-storage-data-1"),
          ("snapshot-schedule", "llm-large-storage-head-data"))
def no_snapshots_at_all(doc):
    remove(doc, "llm-large-backup-snapshots")


@mutation("aws-large", ("snapshot-schedule", "llm-large-storage-data-1"),
          ("snapshot-schedule", "llm-large-storage-head-data"))
def aws_backup_of_one_volume_only(doc):
    remove(doc, "llm-large-backup-snapshots")
    backup_plan(doc, resources=[rid(doc, "llm-large-storage-data-0")])


@mutation("aws-large")
def lustre_backed_up_by_aws_backup(doc):
    find(doc, "llm-large-storage-lustre", "fsx/")["inputs"]["automaticBackupRetentionDays"] = 0
    backup_plan(doc, resources=["arn:aws:fsx:*:*:file-system/*"])


@mutation("aws-large", ("stateful-protected", "scratch-zfs"))
def openzfs_without_protect(doc):
    add(doc, "aws:fsx/openZfsFileSystem:OpenZfsFileSystem", "scratch-zfs", {"deploymentType": "SINGLE_AZ_1",
        "storageCapacity": 64, "subnetIds": [rid(doc, SUBNET)], "throughputCapacity": 64,
        "tags": {"gpu-cluster:name": "llm-large"}})


@mutation("aws-large")
def windows_fsx_protected(doc):
    add(doc, "aws:fsx/windowsFileSystem:WindowsFileSystem", "home-win", {"storageCapacity": 32,
        "subnetIds": [rid(doc, SUBNET)], "throughputCapacity": 8, "tags": {"gpu-cluster:name": "llm-large"}},
        protect=True)


@mutation("aws-large", ("stateful-protected", "ontap-vol"))
def ontap_volume_without_protect(doc):
    add(doc, "aws:fsx/ontapVolume:OntapVolume", "ontap-vol", {"name": "data", "sizeInMegabytes": 1024,
                                                              "storageVirtualMachineId": "svm-1"})


@mutation("aws-large", ("stateful-protected", "home-efs"))
def efs_without_protect(doc):
    add(doc, "aws:efs/fileSystem:FileSystem", "home-efs", {"encrypted": True})


@mutation("aws-large", ("storage-encrypted", "home-efs"))
def efs_unencrypted(doc):
    add(doc, "aws:efs/fileSystem:FileSystem", "home-efs", {"encrypted": False}, protect=True)


# ---- AWS: buckets ----------------------------------------------------------------------------------

BUCKET = "llm-large-storage-checkpoints"


@mutation("aws-large", ("checkpoint-bucket-private", "public-read"))
def public_bucket_policy(doc):
    add(doc, "aws:s3/bucketPolicy:BucketPolicy", "public-read", {"bucket": rid(doc, BUCKET), "policy": json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                                                 "Resource": "arn:aws:s3:::x/*"}]})})


@mutation("aws-large", ("checkpoint-bucket-private", BUCKET))
def tls_only_policy_removed(doc):
    remove(doc, "llm-large-storage-checkpoints-tls-only")


@mutation("aws-large", ("checkpoint-bucket-private", BUCKET))
def tls_policy_replaced_by_a_role_grant(doc):
    find(doc, "llm-large-storage-checkpoints-tls-only")["inputs"]["policy"] = json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:role/r"},
                                                 "Action": "s3:*", "Resource": "*"}]})


@mutation("aws-large", ("checkpoint-bucket-private", "bucket-acl"))
def public_read_acl(doc):
    add(doc, "aws:s3/bucketAclV2:BucketAclV2", "bucket-acl", {"bucket": rid(doc, BUCKET), "acl": "public-read"})


@mutation("aws-large", ("checkpoint-bucket-private", BUCKET))
def public_access_block_lets_policies_through(doc):
    find(doc, "llm-large-storage-checkpoints-public-access")["inputs"]["blockPublicPolicy"] = False


@mutation("aws-large")
def bucket_policy_for_a_vpc_endpoint(doc):
    add(doc, "aws:s3/bucketPolicy:BucketPolicy", "vpce-read", {"bucket": rid(doc, BUCKET), "policy": json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                                                 "Resource": "arn:aws:s3:::x/*",
                                                 "Condition": {"StringEquals": {"aws:SourceVpce": "vpce-1"}}}]})})


# ---- AWS: the original rules on the rendered shapes ----------------------------------------------------

@mutation("aws-large", ("single-zone", N1))
def second_node_in_another_zone(doc):
    find(doc, N1)["inputs"]["availabilityZone"] = "us-east-1b"


@mutation("aws-large", ("single-zone", "llm-large-storage-data-1"))
def data_volume_in_another_zone(doc):
    find(doc, "llm-large-storage-data-1")["inputs"]["availabilityZone"] = "us-east-1b"


@mutation("aws-large", ("placement-required", N0), ("placement-required", N1))
def spread_placement_group(doc):
    find(doc, "llm-large-compute-placement")["inputs"]["strategy"] = "spread"


@mutation("aws-large", ("rdma-enabled", LT))
def half_the_efa_interfaces(doc):
    lt = find(doc, LT)["inputs"]
    lt["networkInterfaces"] = lt["networkInterfaces"][:16]


@mutation("aws-large", ("budget-alarm", N0))
def budget_removed(doc):
    remove(doc, "llm-large-budget-monthly")


@mutation("aws-large", ("budget-alarm", N0))
def budget_without_subscribers(doc):
    for n in find(doc, "llm-large-budget-monthly")["inputs"]["notifications"]:
        n.pop("subscriberEmailAddresses", None)
        n.pop("subscriberSnsTopicArns", None)


@mutation("aws-large", ("imdsv2-required", LT))
def template_allows_imdsv1(doc):
    find(doc, LT)["inputs"]["metadataOptions"]["httpTokens"] = "optional"


@mutation("aws-large", ("imdsv2-required", N0))
def node_overrides_imds_to_optional(doc):
    find(doc, N0)["inputs"]["metadataOptions"]["httpTokens"] = "optional"


@mutation("aws-large", ("no-spot-only-critical", N0))
def both_nodes_spot(doc):
    for n in (N0, N1):
        find(doc, n)["inputs"]["instanceMarketOptions"] = {"marketType": "spot"}


@mutation("aws-large", ("dedicated-subnet", "web-0"))
def web_instance_in_the_gpu_subnet(doc):
    add(doc, "aws:ec2/instance:Instance", "web-0", {"instanceType": "t3.large", "subnetId": rid(doc, SUBNET),
        "metadataOptions": {"httpTokens": "required"}, "rootBlockDevice": {"encrypted": True}, "tags": {"team": "web"}})


@mutation("aws-large", ("dedicated-subnet", N0), ("dedicated-subnet", N1))
def template_points_at_an_existing_subnet(doc):
    for nic in find(doc, LT)["inputs"]["networkInterfaces"]:
        nic["subnetId"] = "subnet-0123456789abcdef0"
    for n in (N0, N1):  # the nodes are replaced: their computed subnet is not known before the update
        find(doc, n)["outputs"].pop("subnetId")


@mutation("aws-large")
def unrelated_serverless_resources(doc):
    add(doc, "aws:lambda/function:Function", "api", {"runtime": "python3.12", "handler": "app.handler"})
    add(doc, "aws:dynamodb/table:Table", "sessions", {"hashKey": "id", "billingMode": "PAY_PER_REQUEST"})


# ---- Tencent --------------------------------------------------------------------------------------

def tc_pool(doc, name, itype, subnet, **asc):
    return add(doc, "tencentcloud:Kubernetes/nodePool:NodePool", name, {"clusterId": "cls-1", "name": name,
        "maxSize": 2, "minSize": 2, "desiredCapacity": 2, "vpcId": rid(doc, "tc-large-vpc"), "subnetIds": [subnet],
        "autoScalingConfig": {"instanceType": itype, "instanceChargeType": "POSTPAID_BY_HOUR", **asc}, "tags": T_TAGS})


@mutation("tencent-large", ("no-public-ip", TN0))
def tencent_node_allocates_a_public_ip(doc):
    find(doc, TN0)["inputs"]["allocatePublicIp"] = True


@mutation("tencent-large", ("no-public-ip", "node-eip-assoc"))
def tencent_eip_bound_to_a_node(doc):
    add(doc, "tencentcloud:Eip/association:Association", "node-eip-assoc", {"eipId": rid(doc, "tc-large-nat-eip"),
                                                                            "instanceId": rid(doc, TN1)})


@mutation("tencent-large", ("dedicated-subnet", "gpu-pool"))
def tencent_node_pool_in_an_outside_subnet(doc):
    tc_pool(doc, "gpu-pool", "GN7.20XLARGE320", "subnet-99999999")


@mutation("tencent-large", ("placement-required", "hcc-pool"))
def tencent_node_pool_of_hcc_machines(doc):
    tc_pool(doc, "hcc-pool", "HCCPNV6.96XLARGE2304", rid(doc, TSUB))


@mutation("tencent-large", ("no-public-ip", "gpu-pool"))
def tencent_node_pool_with_public_ips(doc):
    tc_pool(doc, "gpu-pool", "GN7.20XLARGE320", rid(doc, TSUB), publicIpAssigned=True)


@mutation("tencent-large", ("no-spot-only-critical", TN0))
def tencent_spot_scaling_group_and_spot_nodes(doc):
    for n in (TN0, TN1):
        find(doc, n)["inputs"]["instanceChargeType"] = "SPOTPAID"
    add(doc, "tencentcloud:As/scalingConfig:ScalingConfig", "gpu-asc", {"configurationName": "gpu", "imageId": "img-1",
        "instanceTypes": ["GN7.20XLARGE320"], "instanceChargeType": "SPOTPAID"}, rid_="asc-1")
    add(doc, "tencentcloud:As/scalingGroup:ScalingGroup", "gpu-asg", {"scalingGroupName": "gpu", "configurationId": "asc-1",
        "maxSize": 2, "minSize": 1, "vpcId": rid(doc, "tc-large-vpc"), "subnetIds": [rid(doc, TSUB)], "tags": T_TAGS})


@mutation("tencent-large", ("no-public-ip", "gpu-asc"))
def tencent_scaling_config_with_public_ips(doc):
    add(doc, "tencentcloud:As/scalingConfig:ScalingConfig", "gpu-asc", {"configurationName": "gpu", "imageId": "img-1",
        "instanceTypes": ["GN7.20XLARGE320"], "publicIpAssigned": True}, rid_="asc-1")
    add(doc, "tencentcloud:As/scalingGroup:ScalingGroup", "gpu-asg", {"scalingGroupName": "gpu", "configurationId": "asc-1",
        "maxSize": 1, "minSize": 1, "vpcId": rid(doc, "tc-large-vpc"), "subnetIds": [rid(doc, TSUB)], "tags": T_TAGS})


@mutation("tencent-large", ("no-public-ssh", "tc-large-sg-rules"))
def tencent_rule_set_opens_ssh(doc):
    find(doc, "tc-large-sg-rules")["inputs"]["ingresses"].append(
        {"action": "ACCEPT", "cidrBlock": "0.0.0.0/0", "protocol": "TCP", "port": "22"})


@mutation("tencent-large", ("no-public-ssh", "tc-large-sg-rules"))
def tencent_rule_set_opens_ssh_through_an_address_template(doc):
    add(doc, "tencentcloud:Address/template:Template", "anyone", {"name": "anyone", "addresses": ["0.0.0.0/0"]},
        rid_="ipm-anyone")
    find(doc, "tc-large-sg-rules")["inputs"]["ingresses"].append(
        {"action": "ACCEPT", "addressTemplateId": "ipm-anyone", "protocol": "TCP", "port": "22"})


@mutation("tencent-large")
def tencent_ssh_from_an_office_template(doc):
    add(doc, "tencentcloud:Address/template:Template", "office", {"name": "office", "addresses": ["203.0.113.0/24"]},
        rid_="ipm-office")
    find(doc, "tc-large-sg-rules")["inputs"]["ingresses"].append(
        {"action": "ACCEPT", "addressTemplateId": "ipm-office", "protocol": "TCP", "port": "22"})


@mutation("tencent-large")
def tencent_drop_rule_for_ssh(doc):
    add(doc, "tencentcloud:Security/groupRule:GroupRule", "no-ssh", {"securityGroupId": rid(doc, "tc-large-sg"),
        "type": "ingress", "cidrIp": "0.0.0.0/0", "ipProtocol": "TCP", "portRange": "22", "policy": "DROP"})


@mutation("tencent-large", ("no-public-ssh", "subnet-acl"))
def tencent_vpc_acl_accepts_rdp(doc):
    add(doc, "tencentcloud:Vpc/acl:Acl", "subnet-acl", {"vpcId": rid(doc, "tc-large-vpc"), "name": "acl",
                                                        "ingresses": ["ACCEPT#0.0.0.0/0#3389#TCP"]})


@mutation("tencent-large", ("checkpoint-bucket-private", "tc-large-checkpoints"))
def tencent_bucket_acl_body_for_all_users(doc):
    find(doc, "tc-large-checkpoints")["inputs"]["aclBody"] = (
        "<AccessControlPolicy><AccessControlList><Grant><Grantee><URI>http://cam.qcloud.com/groups/global/AllUsers"
        "</URI></Grantee><Permission>READ</Permission></Grant></AccessControlList></AccessControlPolicy>")


@mutation("tencent-large", ("checkpoint-bucket-private", "anon-read"))
def tencent_bucket_policy_for_anyone(doc):
    add(doc, "tencentcloud:Cos/bucketPolicy:BucketPolicy", "anon-read", {"bucket": rid(doc, "tc-large-checkpoints"),
        "policy": json.dumps({"version": "2.0", "Statement": [{"Principal": {"qcs": ["qcs::cam::anyone:anyone"]},
                                                                "Effect": "allow", "Action": ["name/cos:GetObject"]}]})})


@mutation("tencent-large", ("checkpoint-bucket-private", "tc-large-checkpoints"))
def tencent_bucket_public_read(doc):
    find(doc, "tc-large-checkpoints")["inputs"]["acl"] = "public-read"


@mutation("tencent-large", ("stateful-protected", "tc-large-lustre"))
def tencent_cfs_turbo_unprotected(doc):
    find(doc, "tc-large-lustre")["protect"] = False


@mutation("tencent-large", ("rdma-enabled", TN1))
def tencent_node_in_a_second_hpc_cluster(doc):
    add(doc, "tencentcloud:Cvm/hpcCluster:HpcCluster", "tc-large-hpc-b", {"name": "b", "zone": "ap-shanghai-5"},
        rid_="hpc-b")
    find(doc, TN1)["inputs"]["hpcClusterId"] = "hpc-b"


@mutation("tencent-large", ("placement-required", TN0))
def tencent_node_outside_the_hpc_cluster(doc):
    find(doc, TN0)["inputs"].pop("hpcClusterId")


@mutation("tencent-large", ("storage-encrypted", "tc-large-data-1"))
def tencent_data_disk_unencrypted(doc):
    find(doc, "tc-large-data-1")["inputs"]["encrypt"] = False


@mutation("tencent-large", ("single-zone", TN1))
def tencent_second_node_in_another_zone(doc):
    find(doc, TN1)["inputs"]["availabilityZone"] = "ap-shanghai-4"


@mutation("tencent-large", ("budget-alarm", TN0))
def tencent_budget_removed(doc):
    remove(doc, "tc-large-budget", "Billing/budget")


@mutation("tencent-large", ("snapshot-schedule", "tc-large-data-1"))
def tencent_disk_snapshot_attachment_removed(doc):
    remove(doc, "tc-large-data-1-snapshots")


@mutation("tencent-large", ("storage-encrypted", "gpu-pool"))
def tencent_node_pool_with_an_unencrypted_data_disk(doc):
    tc_pool(doc, "gpu-pool", "GN7.20XLARGE320", rid(doc, TSUB), dataDisks=[{"diskType": "CLOUD_PREMIUM",
                                                                            "diskSize": 100, "encrypt": False}])


def judged(stack: str, fn: Callable[[dict], None], form: str) -> set[tuple[str, str]]:
    """The mutated plan's violations. The mocks echo inputs into outputs, as a provider does: outputs
    follow the changed inputs (a removed input is no longer an output)."""
    doc = doc_of(stack)
    before = {r["urn"]: set(r.get("inputs") or {}) for r in doc["deployment"]["resources"]}
    fn(doc)
    for r in doc["deployment"]["resources"]:
        inputs, outputs = r.get("inputs") or {}, r.get("outputs") or {}
        for gone in before.get(r["urn"], set()) - set(inputs):
            outputs.pop(gone, None)
        outputs.update(copied(inputs))
        r["outputs"] = outputs
    if form == "preview":
        doc = preview_form(doc)
    return {(v.policy, v.urn.rsplit("::", 1)[-1]) for v in judged_violations(Plan.from_doc(doc))}


def test_the_campaign_is_large_and_covers_every_rule():
    from gpu_cluster.policyrun import POLICIES
    assert len(MUTATIONS) >= 60 and len({m[0] for m in MUTATIONS}) == len(MUTATIONS)
    covered = {policy for *_, expect in MUTATIONS for policy, _ in expect}
    assert covered >= {p.name for p in POLICIES} - {"budget-covers-estimate"}
    assert sum(1 for *_, expect in MUTATIONS if not expect) >= 10, "benign mutations guard against false alarms"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name,stack,fn,expect", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutation(name, stack, fn, expect, form):
    assert judged(stack, fn, form) == expect
