"""Stateful storage on Tencent Cloud: CFS Turbo at /lustre, the COS checkpoint bucket, CBS data disks.

Everything here outlives the nodes: each resource is `protect`ed and named only from the cluster
name (and the node index for disks), never from tier, instance type or node count, so changing
those never replaces data (docs/architecture.md).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Mapping, Optional

import pulumi
import tencentcloud_iac_pulumi as tencentcloud
from tencentcloud_iac_pulumi.ccn import AttachmentV2 as CcnAttachment

DATA_DISK_TYPE = "CLOUD_HSSD"
"""Enhanced SSD, up to 1000 MB/s per disk (Cloud Block Storage documentation, "Cloud disk types":
intl.cloud.tencent.com/document/product/362/2353)."""
_ABORT_UPLOADS_DAYS = 7
_NONCURRENT_VERSION_DAYS = 30


@dataclass(frozen=True)
class TurboArgs:
    """A CFS Turbo file system (the Tencent counterpart of FSx for Lustre)."""

    storage_type: str
    """TB (Standard Turbo) or TP (High-Performance Turbo): `components.tencentcloud.profile.turbo_type`."""
    capacity_gib: int
    """Size; the spec has checked it against the Turbo increments (catalog limit `cfs_turbo`)."""
    cidr: ipaddress.IPv4Network
    """Range of Turbo's CCN interface, outside the VPC (`addressing.turbo_cidr`)."""


@dataclass(frozen=True)
class StorageArgs:
    cluster_name: str
    """Prefix of every resource name."""
    region: str
    """Provider region (the CCN attachment names the VPC's region)."""
    zone: str
    """The cluster's one zone: the file system and every disk land here."""
    vpc_id: pulumi.Input[str]
    tags: Mapping[str, str]
    nodes: int
    """One data disk per node when `data_disk_gb` > 0."""
    data_disk_gb: int = 0
    """Persistent, encrypted, snapshotted disk per node, GB. 0: none."""
    turbo: Optional[TurboArgs] = None
    """The parallel file system. None: none."""
    checkpoint_bucket: bool = True
    """Create the private, versioned, encrypted COS checkpoint bucket."""
    head_data_gb: int = 0
    """The Slurm head node's persistent state disk, GB (components/headnode.py HEAD_DATA_GB). 0: no head node."""


def turbo_source(file_system_id: str, mount_ip: Optional[str], fs_id: Optional[str]) -> str:
    """The Lustre mount source of a Turbo file system, or a stop when the provider read back no mount
    point: its Read sets mount_ip and fs_id only from DescribeMountTargets' first result
    (resource_tc_cfs_file_system.go Read, v1.82.42), and an empty one would boot every node with a
    /lustre that can never mount."""
    if not mount_ip or not fs_id:
        raise pulumi.RunError(f"CFS Turbo {file_system_id} has no mount point yet (DescribeMountTargets returned "
                              f"none); once the file system is available, run `pulumi up --refresh`: only a "
                              f"refresh reads its mount point again")
    return f"{mount_ip}@tcp0:/{fs_id}/cfs"


ENCRYPT_TYPE = "ENCRYPT_V2"
"""The disks' encryption generation, set rather than left to the API: the two are incompatible, and the
first works only on some older instance types ("推荐优先使用第二代加密技术ENCRYPT_V2，第一代加密技术仅支持在部分
老旧机型使用": vendored tencentcloud-sdk-go cbs/v20170312 CreateDisksRequestParams.EncryptType). The disks are
made apart from any instance, so the API cannot choose by the instance; and it is fixed at creation."""

TURBO_PERMISSION_GROUP = "pgroupbasic"
"""The permission group a Turbo file system takes: CFS's default one (see Storage._turbo)."""


class Storage(pulumi.ComponentResource):
    file_system_id: Optional[pulumi.Output[str]]
    mount_target: Optional[pulumi.Output[str]]
    """`<mount ip>@tcp0:/<fs id>/cfs`, the Lustre mount source of CFS Turbo; None without a file system."""
    bucket: Optional[pulumi.Output[str]]
    data_disk_ids: list[pulumi.Output[str]]
    """Per node index; empty when data_disk_gb is 0."""
    head_disk_id: Optional[pulumi.Output[str]]
    """The head node's state disk; None without a head node."""

    def __init__(self, name: str, args: StorageArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:tencentcloud:Storage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        keep = pulumi.ResourceOptions(parent=self, protect=True)
        prefix, tags = args.cluster_name, dict(args.tags)

        self.file_system_id = self.mount_target = None
        if args.turbo is not None:
            self._turbo(prefix, args, args.turbo, tags, child, keep)

        self.bucket = None
        if args.checkpoint_bucket:
            # COS bucket names end in the account's APPID ("[custom name]-[appid]", provider doc cos_bucket).
            app_id = tencentcloud.user.get_info_output(opts=pulumi.InvokeOutputOptions(parent=self)).app_id
            bucket = private_bucket(f"{prefix}-checkpoints", app_id.apply(lambda appid: f"{prefix}-checkpoints-{appid}"),
                                    tags, keep)
            self.bucket = bucket.bucket

        self.data_disk_ids = []
        if args.data_disk_gb > 0:
            for i in range(args.nodes):
                disk = tencentcloud.cbs.Storage(
                    f"{prefix}-data-{i}", storage_name=f"{prefix}-data-{i}", storage_type=DATA_DISK_TYPE,
                    storage_size=args.data_disk_gb, availability_zone=args.zone, charge_type="POSTPAID_BY_HOUR",
                    encrypt=True, encrypt_type=ENCRYPT_TYPE, tags=tags, opts=keep)
                self.data_disk_ids.append(disk.id)
        self.head_disk_id = None
        if args.head_data_gb > 0:
            # slurmctld's state on the head node: kept, encrypted and snapshotted like the nodes' disks.
            self.head_disk_id = tencentcloud.cbs.Storage(
                f"{prefix}-head-data", storage_name=f"{prefix}-head-data", storage_type=DATA_DISK_TYPE,
                storage_size=args.head_data_gb, availability_zone=args.zone, charge_type="POSTPAID_BY_HOUR",
                encrypt=True, encrypt_type=ENCRYPT_TYPE, tags=tags, opts=keep).id

        self.register_outputs({"file_system_id": self.file_system_id, "mount_target": self.mount_target,
                               "bucket": self.bucket, "data_disk_ids": self.data_disk_ids,
                               "head_disk_id": self.head_disk_id})

    def _turbo(self, prefix: str, args: StorageArgs, turbo: TurboArgs, tags: dict,
               child: pulumi.ResourceOptions, keep: pulumi.ResourceOptions) -> None:
        # CFS Turbo is reached over a CCN, not the VPC directly: net_interface "CCN" with ccn_id and a
        # cidr_block of its own (provider doc cfs_file_system v1.82.42: "Select CCN for a Standard Turbo
        # or High-Performance Turbo one"). The cluster gets its own CCN with its VPC attached.
        ccn = tencentcloud.ccn.Instance(f"{prefix}-ccn", name=prefix, description=f"gpu-cluster {prefix}: CFS Turbo",
                                        tags=tags, opts=child)
        attach = CcnAttachment(f"{prefix}-ccn-vpc", ccn_id=ccn.id, instance_id=args.vpc_id,
                               instance_region=args.region, instance_type="VPC", opts=child)
        fs = tencentcloud.cfs.FileSystem(
            f"{prefix}-lustre", name=prefix, availability_zone=args.zone, protocol="TURBO",
            storage_type=turbo.storage_type, capacity=turbo.capacity_gib, net_interface="CCN",
            ccn_id=ccn.id, cidr_block=str(turbo.cidr), tags=tags,
            # The API's own rule for Turbo (CreateCfsFileSystem PGroupId, "turbo系列请填写pgroupbasic":
            # vendored tencentcloud-sdk-go cfs/v20190719 models.go, provider v1.82.42), and what Read gives
            # back (PGroup.PGroupId), so no later run plans a change. Only the cluster's own CCN, which
            # holds just its VPC, reaches the Turbo interface.
            access_group_id=TURBO_PERMISSION_GROUP,
            # The provider cannot change `capacity` (v1.82.42 Update: "argument `capacity` cannot be
            # changed"), so a new size would plan an update that fails: the stack sets it only at
            # creation. A file system grows in the console or with the CFS API ScaleUpFileSystem
            # (up only); then set storage.lustre.capacity_gib to the new size (the plan notes say so).
            # Nor the mount target's network: Read copies net_interface, cidr_block and ccn_id back from
            # DescribeMountTargets, and Update refuses any change to them ("argument `%s` cannot be changed":
            # resource_tc_cfs_file_system.go v1.82.42, Read and Update, immutableArgs), so a value the API spells
            # differently would plan an update that can only fail.
            opts=pulumi.ResourceOptions.merge(keep, pulumi.ResourceOptions(
                depends_on=[attach], ignore_changes=["capacity", "netInterface", "cidrBlock", "ccnId"])))
        self.file_system_id = fs.id
        # Turbo is mounted with the Lustre client: `mount -t lustre <mount ip>@tcp0:/<fs id>/cfs /mnt` (CFS Turbo
        # "mounting on Linux" guide, cloud.tencent.com/document/product/582), the same source Tencent's own CSI
        # driver mounts ("%s@tcp0:/%s/%s" of the server, the FSID and "cfs", "a hard limit": TencentCloud/
        # kubernetes-csi-tencentcloud driver/cfsturbo/node.go, NodeStageVolume, lustre protocol).
        self.mount_target = pulumi.Output.all(fs.id, fs.mount_ip, fs.fs_id).apply(lambda v: turbo_source(*v))


def private_bucket(name: str, bucket: pulumi.Input[str], tags: dict[str, str],
                   opts: pulumi.ResourceOptions) -> tencentcloud.cos.Bucket:
    """A private, versioned, encrypted COS bucket whose old versions and abandoned uploads expire (the checkpoint
    bucket, and the Slurm boot bucket: components/tencentcloud/head.py). `opts` protects it."""
    return tencentcloud.cos.Bucket(
        name,
        bucket=bucket,
        acl="private",
        versioning_enable=True,
        encryption_algorithm="AES256",
        lifecycle_rules=[
            {"id": "abort-incomplete-uploads", "filter_prefix": "",
             "abort_incomplete_multipart_upload": {"days_after_initiation": _ABORT_UPLOADS_DAYS}},
            {"id": "expire-old-versions", "filter_prefix": "",
             "non_current_expiration": {"non_current_days": _NONCURRENT_VERSION_DAYS}},
        ],
        tags=tags,
        opts=opts,
    )
