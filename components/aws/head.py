"""The Slurm head node on AWS (scheduler: slurm): the munge-key secret, the head node's role and the
instance that runs slurmctld (components/slurm, head_boot_config).

- The munge key is made by the head node at its first boot and kept in a Secrets Manager secret created
  here *without a value* (no SecretVersion: the key never appears in a plan, a state file or user data;
  the boot scripts name only the secret). A secret created without a value answers GetSecretValue with
  ResourceNotFoundException, which is how the head node knows it must make the key
  (components/slurm/clouds.py).
- The head node is a small on-demand CPU instance in the cluster subnet and zone, with no public IP,
  IMDSv2 only, an encrypted root volume, the cluster's security group, and a fixed private address
  (components/headnode.py) every GPU node's user data names. Its slurmctld state lives on its own
  persistent, protected, snapshotted data volume (components/aws/storage.py `head_volume_id`), found at
  boot by the volume id in an instance tag, like the GPU nodes' data volumes.
- A change of its boot config (the Slurm configuration: node count, purchase, /lustre) replaces it:
  cloud-init writes the configuration only at first boot, so an updated user data on a running head node
  would change nothing. The replacement comes back at the same address and mounts the same state disk.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws

from components.aws.boot import (APT_LOCK_WAIT_S, DATA_SERIAL_FROM_IMDS, DATA_VOLUME_TAG, EBS_MODEL,
                                 lustre_mount)
from components.aws.common import (assume_role_policy, aws_managed_policy, policy_output, session_manager_policy,
                                   start_stop_statements, tagged, zone_offered)
from components.cloudinit import DataDisk, encode, render, size_problem
from components.headnode import HEAD_INSTANCE_TYPES, HEAD_ROLE, ROLE_TAG
from components.slurm import SlurmCluster, head_boot_config

HEAD_INSTANCE_TYPE = HEAD_INSTANCE_TYPES["aws"]

UBUNTU_PARAMETER = "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id"
"""Canonical's Ubuntu 24.04 LTS server image, as the SSM public parameter Canonical publishes
(.../ubuntu/<product>/<release>/stable/current/<arch>/<virt>/<volume type>/ami-id: Canonical,
"Finding Ubuntu images with the AWS SSM Parameter Store", discourse.ubuntu.com/t/15507). The GPU nodes'
Deep Learning AMI is Ubuntu 24.04 too (components/aws/compute.py DLAMI_PARAMETER), so head and nodes
install the same slurm-wlm release from the same Ubuntu archive (configless slurmd needs a slurmctld of
its own release or newer: Slurm upgrade guide)."""

HEAD_ROOT_GB = 30
"""Encrypted gp3 root volume of the head node: the OS, the Slurm and munge packages, the FSx client."""

SECRET_RECOVERY_DAYS = 0
"""A deleted munge-key secret goes at once (0 = ForceDeleteWithoutRecovery: Secrets Manager API reference,
DeleteSecret; provider contract aws:secretsmanager/secret:Secret). A recovery window would keep the
name reserved, so `pulumi destroy` then `pulumi up` within it would fail ("scheduled for deletion"); the
key is no data anyway: a head node whose secret has no value makes a new one."""

DATA_DEVICE = "/dev/sdf"
"""Block-device mapping name of the state volume (Nitro shows it as NVMe; the boot finds it by serial)."""


@dataclass(frozen=True)
class HeadArgs:
    cluster_name: str
    zone: str
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    partition: pulumi.Input[str]
    tags: Mapping[str, str]
    slurm: pulumi.Output[SlurmCluster]
    """The cluster's Slurm input (components.slurm.from_spec), its head address included."""
    data_volume_id: pulumi.Input[str]
    """The head node's persistent state volume (Storage.head_volume_id)."""
    termination_protection: bool = False
    lustre_dns_name: Optional[pulumi.Input[str]] = None
    lustre_mount_name: Optional[pulumi.Input[str]] = None
    after: Sequence[pulumi.Resource] = ()
    """What must exist before the head node boots (the network's routes and rules, Network.ready)."""


def secret_name(cluster_name: str) -> str:
    """The munge-key secret's name, which every boot script carries (never its value)."""
    return f"{cluster_name}-munge-key"


class Head(pulumi.ComponentResource):
    """The munge-key secret and the head node."""

    instance_id: pulumi.Output[str]
    private_ip: pulumi.Output[str]
    secret_arn: pulumi.Output[str]
    secret_name: str

    def __init__(self, name: str, args: HeadArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:aws:Head", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.secret_name = secret_name(args.cluster_name)
        # No kms_key_id: Secrets Manager encrypts with the AWS managed key aws/secretsmanager, and readers
        # then need only secretsmanager:GetSecretValue, no kms:Decrypt (Secrets Manager API reference,
        # GetSecretValue, "Required permissions").
        secret = aws.secretsmanager.Secret(
            f"{name}-munge-key", name=self.secret_name, recovery_window_in_days=SECRET_RECOVERY_DAYS,
            description=f"Munge key of the Slurm cluster {args.cluster_name}: made and stored by its head node "
                        f"at first boot, read by the GPU nodes (never set by the stack)",
            tags=tagged(args.tags, self.secret_name), opts=child)
        self.secret_arn = secret.arn

        profile = self._role(name, args, secret.arn, child)
        self._name = name
        instance = self._instance(name, args, profile)
        aws.ec2.VolumeAttachment(
            f"{name}-data-attachment", instance_id=instance.id, volume_id=args.data_volume_id,
            device_name=DATA_DEVICE, stop_instance_before_detaching=True,
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))
        self.instance = instance
        self.instance_id, self.private_ip = instance.id, instance.private_ip
        self.register_outputs({"instance_id": self.instance_id, "private_ip": self.private_ip,
                               "secret_arn": self.secret_arn})

    def _instance(self, name: str, args: HeadArgs, profile: aws.iam.InstanceProfile) -> aws.ec2.Instance:
        """The head node itself: Ubuntu, a fixed private address, no public IP, its boot from the Slurm input."""
        image = aws.ssm.get_parameter_output(name=UBUNTU_PARAMETER, opts=pulumi.InvokeOptions(parent=self)).insecure_value
        user_data = pulumi.Output.all(args.slurm, args.lustre_dns_name, args.lustre_mount_name).apply(
            lambda v: _user_data(v[0], f"{v[1]}@tcp:/{v[2]}" if v[1] and v[2] else None, name))
        return aws.ec2.Instance(
            f"{name}-instance",
            ami=image,
            instance_type=zone_offered(HEAD_INSTANCE_TYPE, args.zone, self,
                                       what=f"the Slurm head node's type {HEAD_INSTANCE_TYPE}",
                                       remedy=", or set scheduler: none"),
            availability_zone=args.zone,
            subnet_id=args.subnet_id,
            vpc_security_group_ids=[args.security_group_id],
            private_ip=args.slurm.apply(lambda c: c.head_address),
            associate_public_ip_address=False,
            iam_instance_profile=profile.name,
            # IMDSv2 only (FSBP EC2.8), one hop (no containers here); instance tags in the metadata: the
            # boot reads the state volume's id from them (components/aws/boot.py DATA_SERIAL_FROM_IMDS).
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1,
                instance_metadata_tags="enabled"),
            # Tagged like everything else of the cluster, so the budget's tag filter counts it.
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_size=HEAD_ROOT_GB, volume_type="gp3", encrypted=True, delete_on_termination=True,
                tags=tagged(args.tags, f"{name}-root")),
            user_data_base64=user_data,
            user_data_replace_on_change=True,
            # The provider lifts the flag itself before a planned replacement or destroy
            # (terraform-provider-aws ec2_instance.go resourceInstanceDelete: disableInstanceAPITermination),
            # so it guards against console and API terminations, not against `pulumi up`.
            disable_api_termination=args.termination_protection,
            tags=tagged(args.tags, f"{name}-instance", **{ROLE_TAG: HEAD_ROLE, DATA_VOLUME_TAG: args.data_volume_id}),
            # The fixed address is free only once the old head node is gone; a newer Ubuntu image alone
            # never replaces it (the parameter moves with every Canonical release), and a replacement keeps
            # the state's image too (the engine restores ignored properties whenever there is a state:
            # pulumi/pulumi step_generator.go, processIgnoreChanges). For a new image, delete it and let the
            # next `pulumi up` create it (`pulumi destroy --target <urn> --target-dependents`).
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True, ignore_changes=["ami"],
                                        depends_on=list(args.after)))

    def _role(self, name: str, args: HeadArgs, secret_arn: pulumi.Output[str],
              child: pulumi.ResourceOptions) -> aws.iam.InstanceProfile:
        """Session Manager (sessions, no SSH keys), the CloudWatch agent policy the GPU nodes have
        (PutMetricData), and the munge-key secret: read it, and store the key the first time."""
        role_name = f"{name}-role"
        # An instance role: no confused-deputy condition, as on the GPU nodes' (components/aws/compute.py).
        role = aws.iam.Role(role_name, assume_role_policy=assume_role_policy("ec2.amazonaws.com"),
                            description=f"Slurm head node of {args.cluster_name}",
                            tags=tagged(args.tags, role_name), opts=child)
        self.role = role
        # Session Manager only (common.SESSION_MANAGER_ACTIONS), and the CloudWatch agent.
        aws.iam.RolePolicy(f"{name}-role-session-manager", role=role.id, policy=session_manager_policy(),
                           opts=child)
        aws.iam.RolePolicyAttachment(f"{name}-role-cloudwatch", role=role.name,
                                     policy_arn=aws_managed_policy(args.partition, "CloudWatchAgentServerPolicy"),
                                     opts=child)
        grant = aws.iam.RolePolicy(f"{name}-role-munge-key", role=role.id,
                                   policy=munge_policy(secret_arn, write=True), opts=child)
        profile_name = f"{name}-profile"
        # After the grant: the head reads the secret at first boot, and an AccessDenied there stops it.
        return aws.iam.InstanceProfile(profile_name, role=role.name, tags=tagged(args.tags, profile_name),
                                       opts=pulumi.ResourceOptions(parent=self, depends_on=[grant]))


    def allow_power(self, region: str, arns: pulumi.Input[list[str]]) -> aws.iam.RolePolicy:
        """Slurm power saving: slurmctld's resume and suspend programs find the GPU nodes by their tags
        (ec2:DescribeInstances, which takes no resource: Service Authorization Reference, Amazon EC2, "Actions
        defined by Amazon EC2") and start and stop those instances only. Made after the GPU nodes, whose ids
        it names."""
        return aws.iam.RolePolicy(
            f"{self._name}-role-power", role=self.role.id,
            policy=policy_output([
                {"Sid": "FindTheClusterNodes", "Effect": "Allow", "Action": ["ec2:DescribeInstances"], "Resource": "*"},
                *start_stop_statements(arns, region)]),
            opts=pulumi.ResourceOptions(parent=self))


def munge_policy(secret_arn: pulumi.Input[str], write: bool) -> pulumi.Output[str]:
    """Read the munge-key secret (GPU nodes), and put its first value (the head node): that one secret
    only (Secrets Manager user guide, "Permissions reference": GetSecretValue and PutSecretValue take
    the secret as their resource)."""
    actions = ["secretsmanager:GetSecretValue"] + (["secretsmanager:PutSecretValue"] if write else [])
    return policy_output([{"Sid": "MungeKeySecret", "Effect": "Allow", "Action": actions, "Resource": secret_arn}])


def _user_data(c: SlurmCluster, lustre_source: Optional[str], name: str) -> str:
    boot = dataclasses.replace(head_boot_config(
        c, lustre=lustre_mount(lustre_source) if lustre_source else None,
        data_disk=DataDisk(serial_command=DATA_SERIAL_FROM_IMDS), disk_model=EBS_MODEL),
        apt_lock_wait_s=APT_LOCK_WAIT_S)
    encoded = encode(render(boot))
    problem = size_problem(encoded, "raw", f"head node {name}")
    if problem:
        raise pulumi.RunError(problem)
    return encoded

