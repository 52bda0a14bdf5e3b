"""Compute role on AWS (docs/architecture.md): the GPU nodes, packed in one zone.

A cluster placement group for every multi-node or large cluster; one launch template (Deep Learning
AMI, IMDSv2 only, encrypted gp3 root, least-privilege instance profile, every EFA card of the shape,
no public IP, cloud-init boot config); one `aws.ec2.Instance` per node made from it, in the group.
With scheduler slurm every node's boot also joins the cluster's Slurm (components/slurm): configless
slurmd pointed at the head node (components/aws/head.py), created after it.

Why instances and not an Auto Scaling group: each node owns a protected, snapshotted data volume with
a stable name (`<name>-data-<i>`) attached to a stable node `<name>-node-<i>`; an ASG replaces
instances on its own and would orphan those volumes. Per-instance market options also express `mixed`
exactly (node 0 on-demand, the rest spot).
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass
from typing import Literal, Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws

from components.aws.common import (assume_role_policy, aws_managed_policy, policy_output, session_manager_policy,
                                   tagged, zone_offered)
from components.catalog import Shape
from components.aws.boot import DATA_VOLUME_TAG, boot_config
from components.aws.head import munge_policy
from components.cloudinit import encode, render, size_problem
from components.slurm import SlurmCluster, node_boot_parts, with_slurm
from components.spec import NODE_TAG, Capacity, node_is_spot

# The Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04), published as an SSM public
# parameter (docs.aws.amazon.com/dlami/latest/devguide/find-dlami-id.html; its release notes list G4dn,
# G5, P4d, P4de, P5, P5e, P5en among the supported instances). It ships the NVIDIA driver, EFA,
# aws-ofi-nccl and DCGM; components/aws/boot.py installs what it lacks. Ubuntu 24.04 rather than 22.04
# for Slurm: 22.04's slurm-wlm 21.08 has no cgroup/v2 plugin (Slurm source, src/plugins/cgroup at tag
# slurm-21-08-5-1: v1 only) while 22.04 mounts cgroup v2 only, so slurmd could not confine GPUs or even
# start with proctrack/cgroup; 24.04 ships slurm-wlm 23.11 (packages.ubuntu.com/noble/slurmd).
DLAMI_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
DATA_DEVICE = "/dev/sdf"
SCRATCH_DEVICE = "/dev/sdg"
"""Block-device mapping names. On Nitro instances the OS sees NVMe devices instead
(/dev/nvme<N>n1, in no fixed order); the boot scripts find the disks by serial and model."""

Market = Literal["on_demand", "spot"]


@dataclass(frozen=True)
class NetworkInterface:
    """One launch-template network interface: where it sits and what kind it is."""

    network_card_index: int
    device_index: int
    interface_type: Optional[str]
    """"efa" (EFA with ENA), "efa-only", or None for a plain ENA interface."""


def network_interfaces(efa_interfaces: int) -> list[NetworkInterface]:
    """The interface layout for a shape with `efa_interfaces` EFA cards (0: one plain ENA interface).

    One `efa` interface (EFA with ENA) at device index 0 of every network card 0..n-1: the layout
    AWS ParallelCluster and AWS's own p5 examples launch (aws-samples/awsome-distributed-training
    1.architectures/3.aws-batch/0.aws-batch-distributed-training-p5.yaml) and the only EFA interface
    type the provider's launch-template schema validates (gpu_cluster/contracts/aws.yaml,
    networkInterfaces.interfaceType). Each card carries one EFA device, so NCCL sees all of them
    (32 on p5/p5e, 16 on p5en, 4 on p4d).
    """
    if efa_interfaces <= 0:
        return [NetworkInterface(network_card_index=0, device_index=0, interface_type=None)]
    return [NetworkInterface(network_card_index=card, device_index=0, interface_type="efa")
            for card in range(efa_interfaces)]


BLOCK_HOURS_TAG = "gpu-cluster:block-hours"
BLOCK_SHAPE_TAG = "gpu-cluster:block-shape"
BLOCK_COUNT_TAG = "gpu-cluster:block-count"


def wants_placement_group(nodes: int, tier: str, capacity_type: str = "none") -> bool:
    """Cluster placement for every multi-node cluster and every large cluster (policy placement-required),
    except in a Capacity Block, which is placed close together by AWS and needs no placement group
    (EC2 user guide, "Use Capacity Blocks": "there is no need to use a cluster placement group")."""
    return (nodes > 1 or tier == "large") and capacity_type != "capacity_block"


def block_window(start: datetime.date, duration_hours: int) -> tuple[str, str]:
    """(earliest start, latest end) for the Capacity Block offering lookup: blocks that start on the start
    day (DescribeCapacityBlockOfferings StartDateRange / EndDateRange). The provider's lookup fails
    unless exactly one offering matches (ec2_capacity_block_offering_data_source.go), so the window is
    one day wide."""
    first = datetime.datetime.combine(start, datetime.time(), tzinfo=datetime.timezone.utc)
    last = first + datetime.timedelta(hours=duration_hours, days=1)
    return first.strftime("%Y-%m-%dT%H:%M:%SZ"), last.strftime("%Y-%m-%dT%H:%M:%SZ")


BLOCK_OVER = ("expired", "cancelled", "failed", "payment-failed")
"""Capacity Block states after which it takes no instances (data source ec2_capacity_block_reservation
doc, `state`: active, expired, cancelled, pending, failed, scheduled, payment-pending, payment-failed,
assessing); the others wait for active."""


def offering_in_zone(offering_id: str, offering_zone: str, zone: str) -> str:
    """The offering's id, once it is in the cluster's zone (the block's instances can run nowhere else)."""
    if offering_zone != zone:
        raise pulumi.RunError(f"the Capacity Block offered for these dates is in {offering_zone}, not the cluster's zone "
                              f"{zone}; set cluster.zone: {offering_zone} or choose another capacity.start_date")
    return offering_id


def checkpoint_policy(bucket_arn: pulumi.Input[str]) -> pulumi.Output[str]:
    """Read and write the checkpoint bucket's objects, and list them."""
    return policy_output([
        {"Sid": "ListCheckpoints", "Effect": "Allow",
         "Action": ["s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"],
         "Resource": bucket_arn},
        {"Sid": "ReadWriteCheckpoints", "Effect": "Allow",
         "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                    "s3:ListMultipartUploadParts"],
         "Resource": pulumi.Output.concat(bucket_arn, "/*")},
    ])


def hop_limit(slurm: bool) -> int:
    """IMDS hop limit. With Slurm, 1: a container in its own network namespace (Docker's bridge) is one
    hop further and gets no IMDSv2 token (EC2 user guide, "Instance metadata options": the PUT
    response's hop limit), and the owner-match guard sees only the node's own sockets. Without a
    scheduler there is no munge key to protect and 2 lets such containers reach the node's role (the
    checkpoint bucket), as the EC2 user guide recommends for containers."""
    return 1 if slurm else 2


def market(purchase: str, index: int) -> Market:
    """How node `index` is bought: on_demand, spot, or mixed (node 0 on-demand, the rest spot)."""
    return "spot" if node_is_spot(purchase, index) else "on_demand"


@dataclass(frozen=True)
class ComputeArgs:
    cluster_name: str
    """Names the CloudWatch agent's SSM parameter (AmazonCloudWatch-<cluster name>)."""
    shape: Shape
    """The catalogued instance type: EFA cards and local NVMe drives come from here."""
    nodes: int
    tier: str
    zone: str
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    partition: pulumi.Input[str]
    root_gb: int
    """Encrypted gp3 root volume per node, GB."""
    scratch: str
    """nvme (the local drives: the DLAMI's own volume of them, bind-mounted at /scratch; a RAID0 made at boot
    on another image) | disk (a non-persistent gp3 disk of root_gb) | none."""
    agent_config: str
    """CloudWatch agent configuration JSON (components/aws/monitoring.py)."""
    tags: Mapping[str, str]
    purchase: str = "on_demand"
    """on_demand | spot | mixed (node 0 on-demand, the rest spot)."""
    termination_protection: bool = False
    """Set disable_api_termination on every node (critical clusters)."""
    image_id: Optional[str] = None
    """AMI; None (default): the latest Deep Learning AMI from its SSM public parameter."""
    bucket_arn: Optional[pulumi.Input[str]] = None
    """Checkpoint bucket the nodes may read and write; None: no bucket access."""
    lustre_dns_name: Optional[pulumi.Input[str]] = None
    lustre_mount_name: Optional[pulumi.Input[str]] = None
    data_volume_ids: Sequence[pulumi.Input[str]] = ()
    """One per node, attached at DATA_DEVICE and mounted at /data; empty: none."""
    data_disk_gb: int = 0
    capacity: Optional[Capacity] = None
    """Bought-ahead capacity (spec.Capacity): an On-Demand Capacity Reservation or a Capacity Block for
    every node; None or type none: plain on-demand/spot."""
    slurm: Optional[pulumi.Output[SlurmCluster]] = None
    """scheduler slurm: the cluster's Slurm input; every node's boot joins it (components/slurm
    node_boot_parts, one user data for all nodes: a node learns its index from its gpu-cluster:node tag).
    None: no scheduler."""
    munge_secret_arn: Optional[pulumi.Input[str]] = None
    """The munge-key secret the nodes may read (components/aws/head.py); None: no scheduler."""
    power_tags: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Extra tags on every node saying that Slurm starts and stops it (components/slurm/power.py plan_tags)."""
    after: Sequence[pulumi.Resource] = ()
    """Created before the nodes: the network's routes and rules (Network.ready) and the head node (its
    fixed address must be taken first)."""


class Compute(pulumi.ComponentResource):
    """The GPU nodes: placement group, launch template, instance role and one instance per node."""

    node_ids: list[pulumi.Output[str]]
    placement_group: Optional[pulumi.Output[str]]
    launch_template_id: pulumi.Output[str]
    role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: ComputeArgs, opts: Optional[pulumi.ResourceOptions] = None):
        # Over 60 lines on purpose: the GPU nodes' resources in the order they depend on each other (role,
        # agent parameter, placement group, capacity, image, launch template, nodes and their disks), with the
        # reason for each argument beside it; the pieces that stand alone are methods already.
        super().__init__("gpu-cluster:aws:Compute", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        role, profile = self._instance_role(name, args, child)
        cloudwatch_parameter = f"AmazonCloudWatch-{args.cluster_name}"
        # The managed CloudWatchAgentServerPolicy reads only parameters named AmazonCloudWatch-*.
        # insecure_value: the configuration is no secret, so plans and PR reviews show its changes.
        aws.ssm.Parameter(f"{name}-cloudwatch-config", name=cloudwatch_parameter, type="String",
                          insecure_value=args.agent_config, description=f"CloudWatch agent configuration of {args.cluster_name}",
                          tags=tagged(args.tags, cloudwatch_parameter), opts=child)

        capacity = args.capacity.type if args.capacity else "none"
        self.placement_group = None
        group = None
        if wants_placement_group(args.nodes, args.tier, capacity):
            pg_name = f"{name}-placement"
            group = aws.ec2.PlacementGroup(pg_name, strategy="cluster", tags=tagged(args.tags, pg_name), opts=child)
            self.placement_group = group.name
        self.reservation_id = self._reservation(name, args, group)

        image = (pulumi.Output.from_input(args.image_id) if args.image_id
                 else aws.ssm.get_parameter_output(name=DLAMI_PARAMETER,
                                                   opts=pulumi.InvokeOptions(parent=self)).insecure_value)
        # insecure_value: an AMI id is no secret (`value` is marked sensitive by the provider, which
        # would show the image as [secret] in previews and reviews).
        # The root device's name differs between images (Ubuntu /dev/sda1, Amazon Linux /dev/xvda).
        root_device = aws.ec2.get_ami_output(
            filters=[aws.ec2.GetAmiFilterArgs(name="image-id", values=[image])],
            opts=pulumi.InvokeOptions(parent=self)).root_device_name

        # The shape must be sold in this account's zone: checked at preview, before anything is created.
        # Reserved capacity answers that itself (the reservation or block lookups above check its type and
        # zone), and a shape sold only as Capacity Blocks need not be listed as offered on demand.
        offered: pulumi.Input[str] = args.shape.type
        if capacity not in ("odcr", "capacity_block"):
            offered = zone_offered(args.shape.type, args.zone, self)

        lt_name = f"{name}-launch-template"
        template = aws.ec2.LaunchTemplate(
            lt_name,
            description=f"GPU nodes of {args.cluster_name}: {args.shape.type}",
            image_id=image,
            instance_type=offered,
            update_default_version=True,
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=profile.arn),
            # IMDSv2 only (CKV_AWS_79, FSBP EC2.8); the hop limit: hop_limit(). Instance tags in the
            # metadata: a node reads its data volume id from them (boot.py).
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required",
                http_put_response_hop_limit=hop_limit(args.slurm is not None),
                instance_metadata_tags="enabled"),
            block_device_mappings=self._block_devices(args, root_device),
            network_interfaces=[
                aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                    network_card_index=nic.network_card_index,
                    device_index=nic.device_index,
                    interface_type=nic.interface_type,
                    subnet_id=args.subnet_id,
                    security_groups=[args.security_group_id],
                    delete_on_termination="true",
                    # No public IP (CKV_AWS_88). AWS rejects the setting when there are several
                    # interfaces (EC2 user guide, "Network interfaces": a public IP only on a single-interface launch);
                    # the private subnet never maps public IPs anyway.
                    associate_public_ip_address="false" if args.shape.rdma_interfaces in (0, 1) else None,
                )
                for nic in network_interfaces(args.shape.rdma_interfaces or 0)
            ],
            placement=aws.ec2.LaunchTemplatePlacementArgs(availability_zone=args.zone,
                                                           group_name=self.placement_group),
            # No `monitoring` here: the provider sends RunInstances Monitoring.Enabled from the instance's
            # own `monitoring` every time (terraform-provider-aws ec2_instance.go buildInstanceOpts), which
            # overrides the template's. Basic 5-minute EC2 metrics serve: the alarms watch the status checks
            # (1-minute at no charge) and the CloudWatch agent's GPU metrics (components/aws/monitoring.py).
            user_data=self._user_data(name, args, cloudwatch_parameter, self.job_role_arn),
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=tagged(args.tags, f"{name}-node"))
                for kind in ("instance", "volume", "network-interface")
            ],
            tags=tagged(args.tags, lt_name),
            opts=child,
        )
        self.launch_template_id = template.id
        self.role_arn = role.arn

        self.node_ids = []
        # Buying a Capacity Block and launching into it are two updates: EC2 launches instances into a
        # block only once it is active, at its start (EC2 user guide, "Use Capacity Blocks":
        # docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html), while the purchase
        # completes as soon as the block is scheduled (ec2_capacity_block_reservation.go waits for
        # active or scheduled). The first update buys it; with capacity.reservation_id set, each update
        # reads the block's state and launches the nodes only once it is active (components/aws/notes.py
        # says so in the plan). A block starts at a time of day, and may start after start_date.
        state = self._block_state(args)
        self.awaiting_block = args.capacity is not None and (
            args.capacity.awaiting_block() or (state is not None and state != "active"))
        for i in range(0 if self.awaiting_block else args.nodes):
            volume = args.data_volume_ids[i] if i < len(args.data_volume_ids) else None
            node = self._node(name, i, args, template, volume)
            self.node_ids.append(node.id)
            if i < len(args.data_volume_ids):
                aws.ec2.VolumeAttachment(
                    f"{name}-data-{i}-attachment", instance_id=node.id, volume_id=args.data_volume_ids[i],
                    device_name=DATA_DEVICE, stop_instance_before_detaching=True,
                    # Detached from a replaced node before it is attached to the new one (the contract).
                    opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))

        self.register_outputs({
            "node_ids": self.node_ids,
            "placement_group": self.placement_group,
            "reservation_id": self.reservation_id,
            "launch_template_id": self.launch_template_id,
            "role_arn": self.role_arn,
        })

    def _block_state(self, args: ComputeArgs) -> Optional[str]:
        """The state of the bought Capacity Block the stack names (None for other capacity). The lookup
        filters by the cluster's instance type and zone: a wrong id, or a block of another shape or
        zone, matches nothing and fails the preview before anything is created
        (ec2_capacity_block_reservation_data_source.go), instead of failing RunInstances after the
        network, file system and head node exist."""
        cap = args.capacity
        if cap is None or cap.type != "capacity_block" or not cap.reservation_id:
            return None
        block = aws.ec2.get_capacity_block_reservation(
            id=cap.reservation_id,
            filters=[aws.ec2.GetCapacityBlockReservationFilterArgs(name="instance-type", values=[args.shape.type]),
                     aws.ec2.GetCapacityBlockReservationFilterArgs(name="availability-zone", values=[args.zone])],
            opts=pulumi.InvokeOptions(parent=self))
        if block.reservation_type not in (None, "capacity-block"):
            # The data source does not filter by type itself (it describes the id it is given).
            raise pulumi.RunError(f"cluster.capacity.reservation_id={cap.reservation_id!r} is a "
                                  f"{block.reservation_type} capacity reservation, not a Capacity Block; allowed: the "
                                  f"id of a Capacity Block (or capacity.type: odcr for an On-Demand reservation)")
        if block.instance_count is not None and block.instance_count < args.nodes:
            raise pulumi.RunError(f"cluster.nodes={args.nodes}: the Capacity Block {cap.reservation_id} holds "
                                  f"{block.instance_count} instance(s); allowed: up to {block.instance_count}")
        if block.state in BLOCK_OVER:
            # Its instances are gone (EC2 terminates them at the end); declaring no nodes would make the
            # update delete the attachments of instances that no longer exist, and fail.
            raise pulumi.RunError(f"cluster.capacity.reservation_id={cap.reservation_id!r}: the Capacity Block is "
                                  f"{block.state}, its instances are gone; allowed: a new block (capacity "
                                  f"start_date and duration_hours, without reservation_id) or capacity.type: none, "
                                  f"then `pulumi up --refresh`")
        return block.state

    def _reservation(self, name: str, args: ComputeArgs,
                     group: Optional[aws.ec2.PlacementGroup]) -> Optional[pulumi.Output[str]]:
        """The capacity reservation every node launches into, when capacity is bought ahead."""
        cap = args.capacity
        if cap is None or cap.type == "none":
            return None
        if cap.reservation_id:
            return pulumi.Output.from_input(cap.reservation_id)
        res_name = f"{name}-capacity"
        if cap.type == "odcr":
            # Targeted: only these nodes use it. In the placement group, so the reserved capacity is packed
            # as the nodes are (EC2 user guide, "Capacity Reservations in cluster placement groups"). Billed
            # whether the nodes run or not (EC2 user guide, "On-Demand Capacity Reservations").
            return aws.ec2.CapacityReservation(
                res_name, instance_type=args.shape.type, instance_platform="Linux/UNIX",
                availability_zone=args.zone, instance_count=args.nodes, instance_match_criteria="targeted",
                end_date_type="unlimited", placement_group_arn=group.arn if group is not None else None,
                tags=tagged(args.tags, res_name), opts=pulumi.ResourceOptions(parent=self)).id
        start, end = block_window(cap.start_date, cap.duration_hours)
        offering = aws.ec2.get_capacity_block_offering_output(
            capacity_duration_hours=cap.duration_hours, instance_count=args.nodes, instance_type=args.shape.type,
            start_date_range=start, end_date_range=end, opts=pulumi.InvokeOptions(parent=self))
        # Creating it buys the block, which cannot be cancelled, and deleting it only forgets it
        # (terraform-provider-aws ec2_capacity_block_reservation.go): kept on delete, and never bought
        # again because a later lookup finds another offering.
        offering_id = pulumi.Output.all(offering.capacity_block_offering_id, offering.availability_zone).apply(
            lambda v: offering_in_zone(v[0], v[1], args.zone))
        return aws.ec2.CapacityBlockReservation(
            res_name, capacity_block_offering_id=offering_id, instance_platform="Linux/UNIX",
            # The block's length, for the pricer and the reader: the reservation's own end_date is known
            # only after the purchase.
            tags=tagged({**args.tags, BLOCK_HOURS_TAG: str(cap.duration_hours), BLOCK_SHAPE_TAG: args.shape.type,
                         BLOCK_COUNT_TAG: str(args.nodes)}, res_name),
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True,
                                        ignore_changes=["capacityBlockOfferingId"])).id

    def _instance_role(self, name: str, args: ComputeArgs,
                       child: pulumi.ResourceOptions) -> tuple[aws.iam.Role, aws.iam.InstanceProfile]:
        """Least privilege: Session Manager (sessions, no SSH keys), the CloudWatch agent, and with Slurm reading
        (only reading) the munge-key secret. The checkpoint bucket: on the node role without Slurm; with
        Slurm the metadata service is closed to jobs (components/slurm metadata-guard), so the bucket is
        the jobs' own role's (self.job_role_arn), which only the node role may assume."""
        role_name = f"{name}-node-role"
        # No aws:SourceAccount / aws:SourceArn here: an instance role is not a cross-service confused-deputy
        # case. EC2 assumes it only for an instance of this account whose launcher holds iam:PassRole on it,
        # and EC2 documents the plain ec2.amazonaws.com trust policy with no such condition (EC2 user guide,
        # "IAM roles for Amazon EC2", create an IAM role: docs.aws.amazon.com/AWSEC2/latest/UserGuide/
        # iam-roles-for-amazon-ec2.html). The service roles carry them (components/aws/common.py).
        role = aws.iam.Role(role_name, assume_role_policy=assume_role_policy("ec2.amazonaws.com"),
                            description=f"GPU nodes of {args.cluster_name}", tags=tagged(args.tags, role_name), opts=child)
        # Session Manager only (common.SESSION_MANAGER_ACTIONS), and the CloudWatch agent.
        aws.iam.RolePolicy(f"{name}-node-role-session-manager", role=role.id, policy=session_manager_policy(),
                           opts=child)
        aws.iam.RolePolicyAttachment(f"{name}-node-role-cloudwatch", role=role.name,
                                     policy_arn=aws_managed_policy(args.partition, "CloudWatchAgentServerPolicy"),
                                     opts=child)
        grants = []
        if args.munge_secret_arn is not None:
            grants.append(aws.iam.RolePolicy(f"{name}-node-role-munge-key", role=role.id,
                                             policy=munge_policy(args.munge_secret_arn, write=False), opts=child))
        self.job_role_arn = None
        if args.bucket_arn is not None and args.slurm is not None:
            job_role_name = f"{name}-job-role"
            # Trusts the node role only (IAM user guide, "IAM JSON policy elements: Principal", role
            # principals); the node role is allowed to assume it and nothing else of STS's.
            job_role = aws.iam.Role(
                job_role_name, description=f"Jobs on the GPU nodes of {args.cluster_name}: the checkpoint bucket",
                assume_role_policy=policy_output([{"Effect": "Allow", "Principal": {"AWS": role.arn},
                                                   "Action": "sts:AssumeRole"}]),
                tags=tagged(args.tags, job_role_name), opts=child)
            aws.iam.RolePolicy(f"{name}-job-role-checkpoints", role=job_role.id,
                               policy=checkpoint_policy(args.bucket_arn), opts=child)
            grants.append(aws.iam.RolePolicy(
                f"{name}-node-role-job-role", role=role.id,
                policy=policy_output([{"Sid": "JobCredentials", "Effect": "Allow", "Action": "sts:AssumeRole",
                                       "Resource": job_role.arn}]), opts=child))
            self.job_role_arn = job_role.arn
        elif args.bucket_arn is not None:
            aws.iam.RolePolicy(f"{name}-node-role-checkpoints", role=role.id,
                               policy=checkpoint_policy(args.bucket_arn), opts=child)
        profile_name = f"{name}-node-profile"
        # After the secret grant: a node reads the munge key at first boot, and AccessDenied stops it.
        profile = aws.iam.InstanceProfile(profile_name, role=role.name, tags=tagged(args.tags, profile_name),
                                          opts=pulumi.ResourceOptions(parent=self, depends_on=grants))
        return role, profile

    @staticmethod
    def _block_devices(args: ComputeArgs, root_device: pulumi.Input[str]) -> list:
        def gp3(size: int) -> aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs:
            return aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                volume_size=size, volume_type="gp3", encrypted="true", delete_on_termination="true")

        devices = [aws.ec2.LaunchTemplateBlockDeviceMappingArgs(device_name=root_device, ebs=gp3(args.root_gb))]
        if args.scratch == "disk":
            # Non-persistent scratch: deleted with the node; sized like the root volume.
            devices.append(aws.ec2.LaunchTemplateBlockDeviceMappingArgs(device_name=SCRATCH_DEVICE, ebs=gp3(args.root_gb)))
        return devices

    @staticmethod
    def _user_data(name: str, args: ComputeArgs, cloudwatch_parameter: str,
                   job_role_arn: Optional[pulumi.Output[str]]) -> pulumi.Output[str]:
        """cloud-init as data, gzip and base64 for the launch template (components/cloudinit.py encode:
        with Slurm the document is over EC2's 16 KB). Only rendering happens inside apply() (no resources
        are created there, so previews stay complete)."""
        def document(lustre_source: Optional[str], slurm: Optional[SlurmCluster], job_role: Optional[str]) -> str:
            boot = boot_config(args.shape, args.scratch, cloudwatch_parameter, lustre_source,
                               data_disk=bool(args.data_volume_ids), image_scratch=args.image_id is None)
            if slurm is not None:
                if slurm.job_credentials != (job_role is not None):
                    # slurm.conf (on the head node) names task-prolog exactly when the nodes install it.
                    raise ValueError(f"the Slurm input says job_credentials={slurm.job_credentials}, but the "
                                     f"nodes {'have' if job_role else 'have no'} job role")
                slurm = dataclasses.replace(slurm, job_role=job_role or "")
                boot = with_slurm(boot, node_boot_parts(slurm))
            encoded = encode(render(boot))
            problem = size_problem(encoded, "raw", f"the GPU nodes of {args.cluster_name}")
            if problem:
                raise pulumi.RunError(problem)
            return encoded

        lustre = (pulumi.Output.concat(args.lustre_dns_name, "@tcp:/", args.lustre_mount_name)
                  if args.lustre_dns_name is not None and args.lustre_mount_name is not None else None)
        return pulumi.Output.all(lustre, args.slurm, job_role_arn).apply(lambda v: document(v[0], v[1], v[2]))

    def _node(self, name: str, index: int, args: ComputeArgs, template: aws.ec2.LaunchTemplate,
              data_volume: Optional[pulumi.Input[str]]) -> aws.ec2.Instance:
        node_name = f"{name}-node-{index}"
        how = market(args.purchase, index)
        spot = None
        if how == "spot":
            # Spot instances that stop or hibernate on interruption cannot be in a cluster placement
            # group; terminate can (EC2 user guide, "Placement groups": rules and limitations).
            spot = aws.ec2.InstanceInstanceMarketOptionsArgs(
                market_type="spot",
                spot_options=aws.ec2.InstanceInstanceMarketOptionsSpotOptionsArgs(
                    instance_interruption_behavior="terminate", spot_instance_type="one-time"))
        # No subnet or security groups here: they sit on the template's network interfaces, and EC2
        # rejects both on the same launch request. IMDS and root settings are repeated so every node in
        # a plan or a `pulumi stack export` shows them without resolving the template.
        # A running GPU node is never replaced because its template moved on. The AWS provider forces
        # a new instance when the template's default version differs from the one the instance was
        # launched with (terraform-provider-aws internal/service/ec2/ec2_instance.go, CustomizeDiff on
        # launch_template.0.version) — and a new DLAMI release or boot config makes a new version. So
        # the node ignores changes to its template reference: new and replaced nodes get the current
        # template, and a node is rolled on purpose with `pulumi up --replace <urn>`. The instance
        # type is set here too, so changing it is an in-place stop/resize/start.
        reservation = None
        if self.reservation_id is not None:
            reservation = aws.ec2.InstanceCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.InstanceCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=self.reservation_id))
            if args.capacity.type == "capacity_block":
                # A Capacity Block is its own market (EC2 API, InstanceMarketOptionsRequest MarketType).
                spot = aws.ec2.InstanceInstanceMarketOptionsArgs(market_type="capacity-block")
        return aws.ec2.Instance(
            node_name,
            launch_template=aws.ec2.InstanceLaunchTemplateArgs(id=template.id, version="$Default"),
            capacity_reservation_specification=reservation,
            instance_type=args.shape.type,
            availability_zone=args.zone,
            placement_group=self.placement_group,
            instance_market_options=spot,
            # Spot nodes are reclaimed whatever the flag says; EC2 refuses termination protection on them.
            disable_api_termination=args.termination_protection and how == "on_demand",
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required",
                http_put_response_hop_limit=hop_limit(args.slurm is not None),
                instance_metadata_tags="enabled"),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_size=args.root_gb, volume_type="gp3", encrypted=True, delete_on_termination=True),
            # The data volume's id as a tag, which the boot config reads from the instance metadata.
            tags=tagged(args.tags, node_name, **{NODE_TAG: str(index), "gpu-cluster:market": how},
                        **args.power_tags,
                        **({DATA_VOLUME_TAG: data_volume} if data_volume is not None else {}),
                        **({BLOCK_HOURS_TAG: str(args.capacity.duration_hours)}
                           if args.capacity is not None and args.capacity.type == "capacity_block"
                           and args.capacity.duration_hours else {})),
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["launchTemplate"], depends_on=list(args.after)),
        )
