"""The GPU nodes on Tencent Cloud: CVM instances in one zone, packed into an HPC cluster when RDMA.

Packing: Tencent's placement groups (`placement.Group`, type HOST | SW | RACK) are disaster-recovery
groups that put every member on a *different* host, switch or rack — they spread instances apart and
cannot pack them (facts/tencentcloud.md, "placement group"; CVM "spread placement group" docs). HCC
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

from components.spec import Purchase, node_is_spot

SCRATCH_DISK_GB = 1000
"""Size of the non-persistent scratch disk when storage.scratch is "disk" (the spec has no size
field for it)."""
SPOT_PRICE_CEILING = "1000.00"
"""spot_max_price when the catalog has no on-demand price (all Tencent GPU shapes today). SPOTPAID
instances are billed at the market price, not at the maximum (facts/tencentcloud.md, "Spot"), so a
ceiling far above any GPU shape's hourly price means "pay the market price, never be outbid"."""


def system_disk_type(hpc: bool) -> str:
    """HCC shapes are bare-metal hosts whose system disk is local: the provider's own HCC acceptance
    test (TestAccTencentCloudInstanceResourceHPC) uses LOCAL_BASIC. Every other GPU family takes an
    Enhanced SSD cloud disk (CLOUD_HSSD); that GN7/PNV4/GT4 offer HSSD in every zone is unconfirmed —
    CLOUD_BSSD is the fallback to try where a zone refuses it."""
    return "LOCAL_BASIC" if hpc else "CLOUD_HSSD"


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
    user_data: pulumi.Input[str]
    """Plain-text #cloud-config (sent as user_data_raw; the provider base64-encodes it)."""
    root_gb: int
    tags: Mapping[str, str]
    hpc: bool = False
    """HCC RDMA shape: create an HPC cluster and place every node in it."""
    critical: bool = False
    """Enable termination protection (disable_api_termination) on every node."""
    spot_max_price: str = SPOT_PRICE_CEILING
    scratch_disk_gb: int = 0
    """Non-persistent scratch disk per node, deleted with the instance. 0: none."""
    data_disk_ids: Sequence[pulumi.Input[str]] = field(default_factory=tuple)
    """Persistent CBS disks (Storage), attached to the node of the same index."""


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

        scratch = ([{"data_disk_type": "CLOUD_HSSD", "data_disk_size": args.scratch_disk_gb,
                     "delete_with_instance": True, "encrypt": True}] if args.scratch_disk_gb else None)
        self.node_ids, self.private_ips = [], []
        for i in range(args.nodes):
            spot = node_is_spot(args.purchase, i)
            node = tencentcloud.instance.Instance(
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
                system_disk_type=system_disk_type(args.hpc),
                system_disk_size=args.root_gb,
                data_disks=scratch,
                hpc_cluster_id=self.hpc_cluster_id,
                instance_charge_type="SPOTPAID" if spot else "POSTPAID_BY_HOUR",
                spot_instance_type="ONE-TIME" if spot else None,
                spot_max_price=args.spot_max_price if spot else None,
                # Termination protection on the on-demand nodes of a critical cluster: a spot node is
                # reclaimed by the cloud whatever the flag says, and protecting it only blocks cleanup.
                disable_api_termination=args.critical and not spot,
                user_data_raw=args.user_data,
                tags=tags,
                # A node keeps the image it was created with: a newer public image (the default is
                # looked up at every run) must not reinstall a running GPU node. New and replaced
                # nodes get the current one; roll a node on purpose with `pulumi up --replace`.
                opts=pulumi.ResourceOptions(parent=self, ignore_changes=["imageId"]),
            )
            self.node_ids.append(node.id)
            self.private_ips.append(node.private_ip)
            if i < len(args.data_disk_ids):
                tencentcloud.cbs.StorageAttachment(f"{prefix}-data-{i}-attach", storage_id=args.data_disk_ids[i],
                                                   instance_id=node.id, opts=child)

        self.register_outputs({"node_ids": self.node_ids, "private_ips": self.private_ips,
                               "hpc_cluster_id": self.hpc_cluster_id})
