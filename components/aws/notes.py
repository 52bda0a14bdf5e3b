"""What an AWS plan must say aloud (pure: no Pulumi), added to the cluster's notes by `load_spec`.

Each note states a fact of the cloud that changes what `pulumi up` delivers, with its source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from components import catalog
from components.spec import NAME_TAG

if TYPE_CHECKING:
    from components.catalog import Shape
    from components.spec import ClusterSpec

COST_TAG_COMMAND = (f"aws ce update-cost-allocation-tags-status --cost-allocation-tags-status "
                    f"TagKey={NAME_TAG},Status=Active")


def fsx_backup_days(spec: "ClusterSpec") -> int:
    """Days of FSx automatic backups: `snapshots.retain` capped at the service maximum, and none for a
    file system linked to S3 — FSx backs up only persistent file systems "not linked to an Amazon S3
    data repository" (FSx for Lustre user guide, "Working with backups":
    docs.aws.amazon.com/fsx/latest/LustreGuide/using-backups-fsx.html; CreateBackup API reference)."""
    lustre = spec.storage.lustre
    if lustre is None or lustre.import_path:
        return 0
    return min(spec.snapshots.retain, catalog.limit("aws", "fsx_backup_retention_days_max"))


def notes(spec: "ClusterSpec", shape: "Shape") -> list[str]:
    out = [
        f"budget: it counts only resources tagged {NAME_TAG}, and AWS Budgets filters on a user tag only once "
        f"that key is an active cost-allocation tag. Activate it once per account (not per cluster, and never "
        f"by a cluster's stack, whose destroy would switch it off for every cluster): {COST_TAG_COMMAND} — "
        f"possible up to 24 h after the first tagged resource is billed "
        f"(docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/activating-tags.html)",
    ]
    lustre = spec.storage.lustre
    cap = catalog.limit("aws", "fsx_backup_retention_days_max")
    if lustre is not None and lustre.import_path:
        out.append(f"storage.lustre.import_path={lustre.import_path}: FSx for Lustre cannot back up a file system "
                   f"linked to S3 (FSx for Lustre user guide, \"Working with backups\"), so it has no automatic "
                   f"backups; the S3 bucket holds the durable copy of the linked data — keep results that exist only "
                   f"on /lustre in the checkpoint bucket or on /data")
    elif lustre is not None and spec.snapshots.retain > cap:
        out.append(f"snapshots.retain={spec.snapshots.retain}: FSx for Lustre keeps automatic backups at most {cap} "
                   f"days, so the file system's backups are kept {cap} days (data-volume snapshots keep "
                   f"{spec.snapshots.retain})")
    return out
