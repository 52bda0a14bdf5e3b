"""Snapshot schedules on Tencent Cloud: a CBS snapshot policy on every data disk (the Slurm head node's
state disk too), CFS auto-snapshots.

The hours come from the shared `components.snapshot_schedules` so both clouds snapshot at the same times for
the same `snapshots.every_hours`; `snapshots.retain` is days here (CBS `retention_days`, CFS
`alive_days`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from components.snapshot_schedules import ALL_WEEKDAYS, snapshot_hours

CFS_EVERY_DAY = "1,2,3,4,5,6,7"
"""CFS `day_of_week`: every day. CFS numbers the days 1 (Monday) to 7 (Sunday) — unlike CBS, whose
`repeat_weekdays` runs 0 (Sunday) to 6; the CFS numbering is unconfirmed in the provider doc."""


@dataclass(frozen=True)
class BackupArgs:
    cluster_name: str
    """Prefix of every resource name."""
    every_hours: int
    """Snapshot interval, dividing a day (1, 2, 3, 4, 6, 8, 12, 24)."""
    retain_days: int
    """Days each snapshot is kept."""
    data_disk_ids: Sequence[pulumi.Input[str]] = field(default_factory=tuple)
    """CBS disks to snapshot, by node index. Empty: no CBS policy."""
    file_system_id: Optional[pulumi.Input[str]] = None
    """CFS Turbo file system to snapshot. None: no CFS policy."""
    head_disk_id: Optional[pulumi.Input[str]] = None
    """The Slurm head node's state disk, snapshotted with the data disks. None: no head node."""


class Backup(pulumi.ComponentResource):
    snapshot_policy_id: Optional[pulumi.Output[str]]
    file_system_policy_id: Optional[pulumi.Output[str]]

    def __init__(self, name: str, args: BackupArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:tencentcloud:Backup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        prefix = args.cluster_name
        hours = snapshot_hours(args.every_hours)

        self.snapshot_policy_id = None
        if args.data_disk_ids or args.head_disk_id is not None:
            policy = tencentcloud.cbs.SnapshotPolicy(
                f"{prefix}-disk-snapshots", snapshot_policy_name=f"{prefix}-data",
                repeat_weekdays=list(ALL_WEEKDAYS), repeat_hours=hours, retention_days=args.retain_days,
                opts=child)
            self.snapshot_policy_id = policy.id
            # One attachment per disk, named by node index, so adding a node adds one attachment and
            # never touches the others.
            for i, disk_id in enumerate(args.data_disk_ids):
                tencentcloud.cbs.SnapshotPolicyAttachment(f"{prefix}-data-{i}-snapshots", snapshot_policy_id=policy.id,
                                                          storage_id=disk_id, opts=child)
            if args.head_disk_id is not None:
                tencentcloud.cbs.SnapshotPolicyAttachment(f"{prefix}-head-data-snapshots", snapshot_policy_id=policy.id,
                                                          storage_id=args.head_disk_id, opts=child)

        self.file_system_policy_id = None
        if args.file_system_id is not None:
            fs_policy = tencentcloud.cfs.AutoSnapshotPolicy(
                f"{prefix}-lustre-snapshots", policy_name=f"{prefix}-lustre",
                hour=",".join(map(str, hours)), day_of_week=CFS_EVERY_DAY, alive_days=args.retain_days,
                opts=child)
            tencentcloud.cfs.AutoSnapshotPolicyAttachment(
                f"{prefix}-lustre-snapshots", auto_snapshot_policy_id=fs_policy.id,
                file_system_ids=args.file_system_id, opts=child)
            self.file_system_policy_id = fs_policy.id

        self.register_outputs({"snapshot_policy_id": self.snapshot_policy_id,
                               "file_system_policy_id": self.file_system_policy_id})
