"""The GPU nodes on Tencent Cloud: CVM instances in one zone, packed into an HPC cluster when RDMA.

Packing: Tencent's placement groups (`placement.Group`, type HOST | SW | RACK) are disaster-recovery
groups that put every member on a *different* host, switch or rack — they spread instances apart and
cannot pack them (CVM documentation, "Spread placement groups": intl.cloud.tencent.com/document/product/213/15486). HCC
RDMA shapes are instead created inside an HPC cluster: `cvm.HpcCluster(zone)` plus `hpc_cluster_id`
on every instance, which keeps the nodes on one RDMA fabric in the zone (provider doc r/instance
v1.82.42, hpc_cluster_id: "If the instance created is a high-performance computing instance, you
need to specify the cluster in which the instance is placed, otherwise it cannot be specified";
acceptance test TestAccTencentCloudInstanceResourceHPC). So no placement group is used at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from components.spec import NODE_TAG, Capacity, Purchase, node_is_spot

HCC_CREATE_TIMEOUT = "60m"
"""How long `pulumi up` waits for an HCC node to reach RUNNING. The provider waits for RUNNING within the create
timeout, 15 minutes unless set (resource_tc_instance.go v1.82.42: Timeouts Create DefaultTimeout(15 * time.Minute),
and Create retries DescribeInstances within d.Timeout(schema.TimeoutCreate)). An HCC node is a whole
RDMA-attached server placed in its HPC cluster, and Tencent publishes no creation time for one: four times the
default, so a slow placement does not fail a `pulumi up` that would have succeeded (the provider records the
instance id before it waits, resource_tc_instance.go v1.82.42 L999: a timed-out node is left in the state as
partially created, and the next `pulumi up` replaces it)."""
SCRATCH_DISK_GB = 1000
"""Size of the non-persistent scratch disk when storage.scratch is "disk" (the spec has no size
field for it)."""
SPOT_PRICE_CEILING = "1000.00"
"""spot_max_price when the catalog has no on-demand price (all Tencent GPU shapes today). SPOTPAID
instances are billed at the market price, not at the maximum (CVM documentation, "Spot instances":
intl.cloud.tencent.com/document/product/213/17816), so a ceiling far above any GPU shape's hourly
price means "pay the market price, never be outbid"."""

SYSTEM_DISK_PREFERENCE = ("CLOUD_HSSD", "CLOUD_BSSD", "CLOUD_SSD", "CLOUD_PREMIUM")
"""Cloud system disks in order of preference (fastest first). Which ones a shape takes in a zone is
asked at deploy time (`system_disk_type`); a cloud disk also keeps the node eligible for "no charges
when shut down" (CVM documentation, intl.cloud.tencent.com/document/product/213/19918)."""
LOCAL_SYSTEM_DISK = "LOCAL_BASIC"
"""For HCC bare-metal shapes that offer no cloud system disk: the provider's own HCC acceptance test
(resource_tc_instance_test.go, TestAccTencentCloudInstanceResourceHPC) creates one with LOCAL_BASIC."""


NOT_SOLD_REMEDY = "choose another zone or instance_type (gpu-cluster catalog --cloud tencentcloud lists where each is sold)"


def system_disk_type(instance_types: list, instance_type: str, zone: str, hpc: bool,
                     remedy: str = NOT_SOLD_REMEDY) -> str:
    """The system disk type to ask for, from what the cloud says the shape takes in the zone.

    `instance_types` is the answer of `tencentcloud.instance.get_types` with a SYSTEM_DISK `cbs_filter`
    (DescribeZoneInstanceConfigInfos and DescribeDiskConfigQuota: data_source_tc_instance_types.go).
    A shape the zone does not sell, or a cloud shape without any cloud system disk, is a sentence here
    rather than a failed RunInstances later."""
    offer = next((t for t in instance_types or [] if t.instance_type == instance_type), None)
    if offer is None:
        raise pulumi.RunError(f"{instance_type} is not sold in {zone} (instance types lookup); {remedy}")
    available = {c.disk_type for c in offer.cbs_configs or [] if c.available and c.disk_usage == "SYSTEM_DISK"}
    for kind in SYSTEM_DISK_PREFERENCE:
        if kind in available:
            return kind
    if hpc:
        return LOCAL_SYSTEM_DISK
    raise pulumi.RunError(f"{instance_type} in {zone} offers none of the system disks {', '.join(SYSTEM_DISK_PREFERENCE)}")


def spot_max_price(price_hourly: Optional[float]) -> str:
    """The on-demand price when the catalog knows it (spot never needs to pay more), else the ceiling."""
    return f"{price_hourly:.2f}" if price_hourly else SPOT_PRICE_CEILING


@dataclass(frozen=True)
class ComputeArgs:
    cluster_name: str
    """Prefix of every resource name."""
    zone: str
    """Every node lands in this zone."""
    instance_type: str
    nodes: int
    purchase: Purchase
    """on_demand → POSTPAID_BY_HOUR; spot → SPOTPAID (China site only); mixed → node 0 on-demand."""
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    image_id: pulumi.Input[str]
    user_data: Sequence[pulumi.Input[str]]
    """Per node: base64 of the gzipped #cloud-config (components/tencentcloud/boot.py user_data)."""
    root_gb: int
    tags: Mapping[str, str]
    family: str = ""
    """The shape's instance family (asked for its system disk types)."""
    hpc: bool = False
    """HCC RDMA shape: create an HPC cluster and place every node in it."""
    critical: bool = False
    """Enable termination protection (disable_api_termination) on every node."""
    spot_max_price: str = SPOT_PRICE_CEILING
    scratch_disk_gb: int = 0
    """Non-persistent scratch disk per node, deleted with the instance. 0: none."""
    data_disk_ids: Sequence[pulumi.Input[str]] = field(default_factory=tuple)
    """Persistent CBS disks (Storage), attached to the node of the same index."""
    capacity: Optional[Capacity] = None
    """capacity.type prepaid: monthly prepaid nodes (PREPAID, the term and its renewal)."""
    node_tags: Mapping[str, str] = field(default_factory=dict)
    """Tags on the GPU node instances only (what the pricer reads: components/spec.py node_cost_tags, and
    components/slurm/power.py plan_tags)."""
    slurm_powers: bool = False
    """Slurm starts and stops the nodes (power saving): `pulumi up --refresh` must not start a stopped one."""
    cam_role_name: Optional[pulumi.Input[str]] = None
    """The nodes' instance role (scheduler slurm: read the munge key, publish the health metric); None: none."""
    after: Sequence[pulumi.Resource] = ()
    """Created before the nodes: the network's route and rules (Network.ready) and the Slurm head node
    (its fixed address must be taken first)."""


RENEW_FLAGS = {True: "NOTIFY_AND_AUTO_RENEW", False: "NOTIFY_AND_MANUAL_RENEW"}
"""instance_charge_type_prepaid_renew_flag by capacity.auto_renew (provider doc instance v1.82.42)."""
DEFAULT_PREPAID_MONTHS = 1


def charge(spot: bool, capacity: Optional[Capacity]) -> dict:
    """How a node is bought: the instance arguments of its charge type (provider doc instance v1.82.42:
    instance_charge_type, instance_charge_type_prepaid_period in months, ..._prepaid_renew_flag)."""
    if spot:
        return {"instance_charge_type": "SPOTPAID"}
    if capacity is not None and capacity.type == "prepaid":
        return {"instance_charge_type": "PREPAID",
                "instance_charge_type_prepaid_period": capacity.months or DEFAULT_PREPAID_MONTHS,
                "instance_charge_type_prepaid_renew_flag": RENEW_FLAGS[capacity.auto_renew]}
    return {"instance_charge_type": "POSTPAID_BY_HOUR"}


class Compute(pulumi.ComponentResource):
    node_ids: list[pulumi.Output[str]]
    private_ips: list[pulumi.Output[str]]
    hpc_cluster_id: Optional[pulumi.Output[str]]

    def __init__(self, name: str, args: ComputeArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:tencentcloud:Compute", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        prefix, tags = args.cluster_name, dict(args.tags)

        self.hpc_cluster_id = None
        if args.hpc:
            hpc = tencentcloud.cvm.HpcCluster(f"{prefix}-hpc", name=prefix, zone=args.zone,
                                              remark=f"gpu-cluster {prefix}: RDMA nodes", opts=child)
            self.hpc_cluster_id = hpc.id

        # Deleted with its node: the provider allows that only for POSTPAID_BY_HOUR instances
        # (resource_tc_instance.go), which is why the spec refuses scratch: disk with spot.
        scratch = ([{"data_disk_type": "CLOUD_HSSD", "data_disk_size": args.scratch_disk_gb,
                     "delete_with_instance": True, "encrypt": True}] if args.scratch_disk_gb else None)
        system_disk = self._system_disk(args)
        self.node_ids, self.private_ips = [], []
        for i in range(args.nodes):
            node = self._node(i, args, prefix, {**tags, **args.node_tags, NODE_TAG: str(i)}, scratch, system_disk)
            self.node_ids.append(node.id)
            self.private_ips.append(node.private_ip)
            if i < len(args.data_disk_ids):
                # Detached from a replaced node before it is attached to the new one (the contract).
                tencentcloud.cbs.StorageAttachment(
                    f"{prefix}-data-{i}-attach", storage_id=args.data_disk_ids[i], instance_id=node.id,
                    opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))

        self.register_outputs({"node_ids": self.node_ids, "private_ips": self.private_ips,
                               "hpc_cluster_id": self.hpc_cluster_id})

    def _system_disk(self, args: ComputeArgs) -> pulumi.Output[str]:
        """The system disk type the shape takes in the zone, asked of the cloud (`system_disk_type`)."""
        prepaid = args.capacity is not None and args.capacity.type == "prepaid"
        offers = tencentcloud.instance.get_types_output(
            filters=[{"name": "zone", "values": [args.zone]}, {"name": "instance-family", "values": [args.family]}],
            cbs_filter={"disk_charge_type": "PREPAID" if prepaid else "POSTPAID_BY_HOUR", "disk_usage": "SYSTEM_DISK",
                        "disk_types": list(SYSTEM_DISK_PREFERENCE)},
            opts=pulumi.InvokeOutputOptions(parent=self))
        return offers.instance_types.apply(
            lambda found: system_disk_type(found, args.instance_type, args.zone, args.hpc))

    def _node(self, i: int, args: ComputeArgs, prefix: str, tags: dict[str, str], scratch: Optional[list[dict]],
              system_disk: pulumi.Output[str]) -> tencentcloud.instance.Instance:
        """GPU node `i`."""
        spot = node_is_spot(args.purchase, i)
        return tencentcloud.instance.Instance(
            f"{prefix}-node-{i}",
            instance_name=f"{prefix}-node-{i}",
            hostname=f"{prefix}-{i}",
            availability_zone=args.zone,
            instance_type=args.instance_type,
            image_id=args.image_id,
            vpc_id=args.vpc_id,
            subnet_id=args.subnet_id,
            orderly_security_groups=[args.security_group_id],
            allocate_public_ip=False,
            system_disk_type=system_disk,
            system_disk_size=args.root_gb,
            data_disks=scratch,
            hpc_cluster_id=self.hpc_cluster_id,
            **charge(spot, args.capacity),
            spot_instance_type="ONE-TIME" if spot else None,
            spot_max_price=args.spot_max_price if spot else None,
            # Termination protection on the on-demand nodes of a critical cluster: a spot node is
            # reclaimed by the cloud whatever the flag says, and protecting it only blocks cleanup.
            disable_api_termination=args.critical and not spot,
            cam_role_name=args.cam_role_name,
            user_data=args.user_data[i],
            tags=tags,
            # A node keeps the image and boot config it was created with: a newer public image (the
            # default is looked up at every run) would reinstall a running GPU node in place, and
            # cloud-init reads user data only at first boot anyway (resource_tc_instance.go Update:
            # image_id → reinstall, user_data/user_data_raw → ModifyUserData). New nodes get the current
            # ones; a replaced node keeps the state's, since the engine puts the old values of ignored
            # properties back whenever there is a state (pulumi/pulumi step_generator.go,
            # processIgnoreChanges), `pulumi up --replace` included. To move a node onto them, delete it
            # and let the next `pulumi up` create it (`pulumi destroy --target <urn> --target-dependents`).
            # userDataRaw stays ignored for nodes created before user data was compressed. The system
            # disk type is looked up at every run too (what the zone sells now), and a change to it resizes
            # the disk with ForceStop (resource_tc_instance.go v1.82.42 Update, system_disk_type →
            # ResizeInstanceDisks ForceStop=true): a node keeps the type it was created with.
            # Under Slurm power saving a node is stopped and started by slurmctld: the provider's Read copies the
            # instance's state into running_flag (STOPPED → false) and its Update starts or stops the instance to
            # match (resource_tc_instance.go v1.82.42, running_flag), so a refresh would start a powered-down node.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["imageId", "userDataRaw", "userData",
                                                                     "systemDiskType"]
                                        + (["runningFlag"] if args.slurm_powers else []),
                                        depends_on=list(args.after),
                                        custom_timeouts=pulumi.CustomTimeouts(create=HCC_CREATE_TIMEOUT) if args.hpc
                                        else None),
        )
