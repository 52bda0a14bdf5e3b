"""The Slurm head node on Tencent Cloud (scheduler: slurm): the munge-key secret, the CAM roles of the
head node and the GPU nodes, and the CVM instance that runs slurmctld (components/slurm head_boot_config).

- The munge key is made by the head node at its first boot and kept in an SSM secret created here
  *without a version* (no ssm.SecretVersion: the key is in no plan, state or user data; the provider's
  Create leaves a secret of type 0 with no version: provider contract tencentcloud:Ssm/secret:Secret).
  The boot scripts name the secret and the version id they read and write (components/slurm/clouds.py).
- The nodes reach the secret and Cloud Monitor with the temporary keys of their instance role
  (`tccli --use-cvm-role`): one CAM role for the head node (read and write the secret), one for the GPU
  nodes (read it), both trusting cvm.qcloud.com and attached with the instance's `cam_role_name`, which
  the provider changes in place (ModifyCamRoleName: provider contract tencentcloud:Instance/instance:Instance).
- The head node is a small pay-as-you-go CPU instance in the cluster subnet and zone, no public IP, the
  cluster's security group, a fixed private address (components/headnode.py), its own protected,
  snapshotted CBS state disk (components/tencentcloud/storage.py head_disk_id), and the GPU nodes' image
  family. A change of its boot config replaces it, as on AWS (components/aws/head.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from components.headnode import HEAD_INSTANCE_TYPES, HEAD_ROLE, ROLE_TAG
from components.slurm import SlurmCluster, node_boot_parts
from components.slurm.boot import head_base_config, head_boot_parts
from components.slurm.bundle import bundle_script, sha256 as bundle_sha256
from components.tencentcloud import boot
from components.tencentcloud.cam import service_role_document
from components.tencentcloud.compute import SYSTEM_DISK_PREFERENCE, system_disk_type
from components.tencentcloud.storage import private_bucket

HEAD_INSTANCE_TYPE = HEAD_INSTANCE_TYPES["tencentcloud"]
HEAD_FAMILY, HEAD_VCPU, HEAD_MEM_GIB = "S5", 4, 8
"""Standard S5 (components/headnode.py HEAD_INSTANCE_TYPES). Whether the cluster's zone sells it is asked
at deploy time, with the system disk types (instance.get_types), and a zone that does not stops `pulumi up`
with a sentence (components/tencentcloud/compute.py system_disk_type)."""

HEAD_SYSTEM_DISK_GB = 50
"""The head node's cloud system disk: the provider's default size (provider doc instance v1.82.42,
system_disk_size: "Default is 50 GB")."""

BOOT_PREFIX = "slurm/"
"""Where a GPU node's Slurm boot (components/slurm/bundle.py) lies in the cluster's boot bucket."""

SECRET_RECOVERY_DAYS = 0
"""A deleted munge-key secret goes at once (ssm_secret recovery_window_in_days: 0 = at once, 1-30 = days
kept; provider contract tencentcloud:Ssm/secret:Secret): a kept name would make `pulumi destroy` then
`pulumi up` fail, and the key is no data (a head whose secret has no value makes a new one)."""


@dataclass(frozen=True)
class HeadArgs:
    cluster_name: str
    region: str
    zone: str
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    image_id: pulumi.Input[str]
    """The GPU nodes' image family (same OS, so the same Slurm packages)."""
    tags: Mapping[str, str]
    slurm: pulumi.Output[SlurmCluster]
    data_disk_id: pulumi.Input[str]
    """The head node's persistent state disk (Storage.head_disk_id)."""
    lustre_source: Optional[pulumi.Input[str]] = None
    after: Sequence[pulumi.Resource] = ()
    """What must exist before the head node boots (the network's route and rules, Network.ready)."""
    nodes: int = 0
    """GPU nodes: each gets its Slurm boot as an object of the boot bucket (Head.node_boot)."""


def secret_name(cluster_name: str) -> str:
    return f"{cluster_name}-munge-key"


def boot_objects_resource(region: str, app_id: str, bucket: str) -> str:
    """CAM resource of the objects under slurm/ in a bucket: qcs::cos:$region:uid/$appid:$bucket/$prefix* (COS
    documentation, "Access Policy Language Overview", intl.cloud.tencent.com/document/product/436/18023)."""
    return f"qcs::cos:{region}:uid/{app_id}:{bucket}/{BOOT_PREFIX}*"


def secret_resource(region: str, owner_uin: str, creator_uin: str, name: str) -> str:
    """CAM resource of one SSM secret: qcs::ssm:$region:uin/$uin:secret/creatorUin/$creatorUin/$secretName
    (Secrets Manager documentation, "Creating an Access Control Policy": tencentcloud.com/document/product/1078/38612)."""
    return f"qcs::ssm:{region}:uin/{owner_uin}:secret/creatorUin/{creator_uin}/{name}"


def policy_document(region: str, owner_uin: str, creator_uin: str, name: str, write: bool,
                    boot_objects: str = "") -> str:
    """The munge-key secret (read; the head node also puts its first value) and Cloud Monitor's
    PutMonitorData for the health metric (operation level: the action takes no resource). With `boot_objects`:
    GetObject on the boot bucket's Slurm boot objects, that COS resource only."""
    actions = ["name/ssm:GetSecretValue"] + (["name/ssm:PutSecretValue"] if write else [])
    statements = [
        {"effect": "allow", "action": actions, "resource": [secret_resource(region, owner_uin, creator_uin, name)]},
        {"effect": "allow", "action": ["name/monitor:PutMonitorData"], "resource": ["*"]},
    ]
    if boot_objects:
        statements.append({"effect": "allow", "action": ["name/cos:GetObject"], "resource": [boot_objects]})
    return json.dumps({"version": "2.0", "statement": statements}, sort_keys=True)


def power_document(region: str, owner_uin: str, node_ids: Sequence[str]) -> str:
    """Slurm power saving on the head node (components/slurm/power.py): find the GPU nodes by their tags
    (DescribeInstances, a read of the account's instance list: its filters are what power-agent needs, and the
    node ids are unknown when the head node's boot is written), and start and stop those instances only (CAM
    resource qcs::cvm:<region>:uin/<owner>:instance/<id>: CVM documentation, "Authorizable Resource Types")."""
    instances = [f"qcs::cvm:{region}:uin/{owner_uin}:instance/{i}" for i in node_ids]
    return json.dumps({"version": "2.0", "statement": [
        {"effect": "allow", "action": ["name/cvm:StartInstances", "name/cvm:StopInstances"], "resource": instances},
        {"effect": "allow", "action": ["name/cvm:DescribeInstances"], "resource": ["*"]},
    ]}, sort_keys=True)


class Head(pulumi.ComponentResource):
    """The munge-key secret, the two instance roles and the head node."""

    instance_id: pulumi.Output[str]
    private_ip: pulumi.Output[str]
    node_role_name: pulumi.Output[str]
    secret_name: str

    def __init__(self, name: str, args: HeadArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:tencentcloud:Head", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        prefix, tags = args.cluster_name, dict(args.tags)
        self.secret_name = secret_name(prefix)
        # No kms_key_id: SSM encrypts with a key it creates (provider contract tencentcloud:Ssm/secret:Secret).
        # Whether reading it through an instance role also needs a KMS permission is unconfirmed: the SSM
        # access-control page names none.
        tencentcloud.ssm.Secret(
            f"{prefix}-munge-key", secret_name=self.secret_name, recovery_window_in_days=SECRET_RECOVERY_DAYS,
            description=f"Munge key of the Slurm cluster {prefix}: made and stored by its head node at first "
                        f"boot, read by the GPU nodes (never set by the stack)",
            tags=tags, opts=child)

        user = tencentcloud.user.get_info_output(opts=pulumi.InvokeOutputOptions(parent=self))
        self._user, self._prefix, self._roles = user, prefix, {}
        self._boot_bucket(prefix, tags, args, user)
        head_role = self._role(prefix, "head", "the Slurm head node", args, user, write=True, child=child)
        node_role = self._role(prefix, "node", "the GPU nodes", args, user, write=False, child=child)
        self.node_role_name = node_role

        instance = self._instance(prefix, tags, args, head_role)
        tencentcloud.cbs.StorageAttachment(f"{prefix}-head-data-attach", storage_id=args.data_disk_id,
                                           instance_id=instance.id,
                                           opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))
        self.instance = instance
        self.instance_id, self.private_ip = instance.id, instance.private_ip
        self.register_outputs({"instance_id": self.instance_id, "private_ip": self.private_ip,
                               "node_role_name": self.node_role_name})

    def _instance(self, prefix: str, tags: dict[str, str], args: HeadArgs,
                  head_role: pulumi.Output[str]) -> tencentcloud.instance.Instance:
        """The head node's CVM instance, booting slurmctld with its state disk (and /lustre)."""
        offers = tencentcloud.instance.get_types_output(
            filters=[{"name": "zone", "values": [args.zone]}, {"name": "instance-family", "values": [HEAD_FAMILY]}],
            cbs_filter={"disk_charge_type": "POSTPAID_BY_HOUR", "disk_usage": "SYSTEM_DISK",
                        "disk_types": list(SYSTEM_DISK_PREFERENCE)},
            opts=pulumi.InvokeOutputOptions(parent=self))
        user_data = pulumi.Output.all(args.slurm, args.lustre_source, args.data_disk_id, self.head_boot,
                                      head_role).apply(lambda v: boot.user_data(boot.with_slurm_boot(
                                          head_base_config(v[0], lustre=boot.lustre_mount(v[1]),
                                                           data_disk=boot.data_disk(v[2])),
                                          head_boot_parts(v[0]).packages, v[3], args.region, v[4]),
                                          f"head node {prefix}-head"))
        return tencentcloud.instance.Instance(
            f"{prefix}-head",
            instance_name=f"{prefix}-head",
            hostname=f"{prefix}-head",
            availability_zone=args.zone,
            instance_type=HEAD_INSTANCE_TYPE,
            image_id=args.image_id,
            vpc_id=args.vpc_id,
            subnet_id=args.subnet_id,
            private_ip=args.slurm.apply(lambda c: c.head_address),
            orderly_security_groups=[args.security_group_id],
            allocate_public_ip=False,
            system_disk_type=offers.instance_types.apply(
                lambda found: system_disk_type(found, HEAD_INSTANCE_TYPE, args.zone, hpc=False, remedy=(
                    "it is the Slurm head node's shape: choose another cluster.zone, or scheduler: none"))),
            system_disk_size=HEAD_SYSTEM_DISK_GB,
            instance_charge_type="POSTPAID_BY_HOUR",
            cam_role_name=head_role,
            # Never termination-protected, even in a critical cluster: a Slurm change replaces the head node
            # by design (its state lives on the protected CBS disk), and the provider's Delete does not lift
            # the protection first, so a protected head node would make that `pulumi up` fail
            # (resource_tc_instance.go v1.82.42, resourceTencentCloudInstanceDelete).
            disable_api_termination=False,
            user_data=user_data,
            user_data_replace_on_change=True,
            tags={**tags, ROLE_TAG: HEAD_ROLE},
            # A newer public image would reinstall the head node in place (resource_tc_instance.go Update:
            # image_id → ResetInstance): it keeps its image until it is replaced. The fixed address is free
            # only once the old head node is gone.
            # (the system disk type, looked up at every run, would force-stop the head to resize: kept as created)
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True,
                                        ignore_changes=["imageId", "systemDiskType"],
                                        depends_on=[*args.after, *self.boot_objects]))

    def allow_power(self, region: str, node_ids: Sequence[pulumi.Input[str]]) -> None:
        """Slurm power saving: the head node's role may start and stop the GPU nodes (power_document). Made after
        the GPU nodes, whose ids it names; power-agent retries a refused call until then."""
        child = pulumi.ResourceOptions(parent=self)
        policy = tencentcloud.cam.Policy(
            f"{self._prefix}-head-power-policy", name=f"{self._prefix}-head-power",
            document=pulumi.Output.all(self._user.owner_uin, *node_ids).apply(
                lambda v: power_document(region, v[0], v[1:])),
            description=f"Slurm power saving: start and stop the GPU nodes of {self._prefix}", opts=child)
        tencentcloud.cam.RolePolicyAttachment(f"{self._prefix}-head-power-attach", role_id=self._roles["head"].id,
                                              policy_id=policy.id, opts=child)

    def _boot_bucket(self, prefix: str, tags: dict[str, str], args: HeadArgs, user) -> None:
        """The private bucket holding each machine's Slurm boot (components/slurm/bundle.py), which its user data
        fetches, and those objects: node_boot[i] is (bucket, key, SHA-256) for node i, head_boot the head node's (its
        user data is near Tencent's 16 KB too, and a change of it replaces the head node, as before). A key names its
        hash, so a changed boot is a new object, and a node keeps reading the one its user data names. A bucket like
        the checkpoint bucket (private, versioned, encrypted, protected: the policy pack asks it of every bucket,
        which it cannot tell apart), though it holds only generated files."""
        self.boot_bucket = private_bucket(f"{prefix}-boot", user.app_id.apply(lambda appid: f"{prefix}-boot-{appid}"),
                                          tags, pulumi.ResourceOptions(parent=self, protect=True))
        self.boot_objects_resource = pulumi.Output.all(user.app_id, self.boot_bucket.bucket).apply(
            lambda v: boot_objects_resource(args.region, v[0], v[1]))
        self.boot_objects: list[tencentcloud.cos.BucketObject] = []
        self.node_boot = [self._boot_object(f"{prefix}-node-{i}", args.slurm.apply(
            lambda c, i=i: bundle_script(node_boot_parts(c, i), f"GPU node {c.node_name(i)}")))
            for i in range(args.nodes)]
        self.head_boot = self._boot_object(f"{prefix}-head", args.slurm.apply(
            lambda c: bundle_script(head_boot_parts(c), f"head node {c.head_name}")))

    def _boot_object(self, name: str, script: pulumi.Output[str]) -> pulumi.Output:
        """One machine's Slurm boot as an object of the boot bucket: (bucket, key, SHA-256), what its user data names."""
        key = script.apply(lambda text: f"{BOOT_PREFIX}{name}-{bundle_sha256(text)[:16]}.sh")
        # Kept in the bucket when the plan moves on to a new key (retain_on_delete): a node created earlier, or
        # recreated with its state's user data (ignore_changes keeps it: compute.py), still fetches the boot it names;
        # the bucket's lifecycle rules do not expire current objects, so old ones stay until the bucket goes.
        obj = tencentcloud.cos.BucketObject(f"{name}-slurm-boot", bucket=self.boot_bucket.bucket, key=key,
                                            content=script, acl="private",
                                            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True))
        self.boot_objects.append(obj)
        return pulumi.Output.all(obj.bucket, obj.key, script).apply(lambda v: (v[0], v[1], bundle_sha256(v[2])))

    def _role(self, prefix: str, who: str, what: str, args: HeadArgs, user, write: bool,
              child: pulumi.ResourceOptions) -> pulumi.Output[str]:
        role = tencentcloud.cam.Role(f"{prefix}-{who}-role", name=f"{prefix}-{who}",
                                     document=service_role_document("cvm.qcloud.com"),
                                     description=f"Instance role of {what} of {prefix} (gpu-cluster)",
                                     tags=dict(args.tags), opts=child)
        policy = tencentcloud.cam.Policy(
            f"{prefix}-{who}-policy", name=f"{prefix}-{who}",
            document=pulumi.Output.all(user.owner_uin, user.uin, self.boot_objects_resource).apply(
                lambda v: policy_document(args.region, v[0], v[1], self.secret_name, write, boot_objects=v[2])),
            description=f"The munge-key secret and the health metric, for {what} of {prefix}", opts=child)
        attach = tencentcloud.cam.RolePolicyAttachment(f"{prefix}-{who}-attach", role_id=role.id,
                                                       policy_id=policy.id, opts=child)
        self._roles[who] = role
        # The name the instances take, known only once the grant is attached: an instance reads the
        # munge key at first boot, and a refused read stops it.
        return pulumi.Output.all(role.name, attach.id).apply(lambda v: v[0])
