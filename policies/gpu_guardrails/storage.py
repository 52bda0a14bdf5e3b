"""Storage guardrails: snapshot schedules, encryption, private versioned buckets, protected state."""

from __future__ import annotations

from typing import Any, Iterable, Optional

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy, StackValidationPolicy

from .props import UNKNOWN, as_bool, as_int, as_str, get, items, known, short
from .stack import StackView, config_list, config_value

AWS_VOLUME = "aws:ebs/volume:Volume"
AWS_LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
AWS_EFS = "aws:efs/fileSystem:FileSystem"
AWS_DLM = "aws:dlm/lifecyclePolicy:LifecyclePolicy"
AWS_DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
"""FSx backs up only persistent file systems "not linked to an Amazon S3 data repository" (FSx for
Lustre user guide, "Working with backups"): a linked one is credited by its association."""
AWS_BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
AWS_PAB = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
AWS_VERSIONING = ("aws:s3/bucketVersioning:BucketVersioning", "aws:s3/bucketVersioningV2:BucketVersioningV2")
AWS_SSE = ("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
           "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2")
TC_DISK = "tencentcloud:Cbs/storage:Storage"
TC_SNAPSHOT_POLICY = "tencentcloud:Cbs/snapshotPolicy:SnapshotPolicy"
TC_SNAPSHOT_ATTACHMENT = "tencentcloud:Cbs/snapshotPolicyAttachment:SnapshotPolicyAttachment"
TC_CFS = "tencentcloud:Cfs/fileSystem:FileSystem"
TC_CFS_POLICY = "tencentcloud:Cfs/autoSnapshotPolicy:AutoSnapshotPolicy"
TC_CFS_ATTACHMENT = "tencentcloud:Cfs/autoSnapshotPolicyAttachment:AutoSnapshotPolicyAttachment"
TC_BUCKET = "tencentcloud:Cos/bucket:Bucket"
TC_BUCKET_VERSION = "tencentcloud:Cos/bucketVersion:BucketVersion"

STATEFUL_TYPES = [AWS_VOLUME, AWS_LUSTRE, AWS_EFS, *AWS_BUCKETS, TC_DISK, TC_CFS, TC_BUCKET]


def _targets(view: StackView, res: Any, key: str, types: tuple[str, ...],
             split_commas: bool = False) -> Optional[list[Any]]:
    """Every resource of `types` that `res.props[key]` (an id, a list of ids or "a,b") refers to; None
    when the reference is unknown (preview) and no dependency edge tells what it is."""
    value = get(res.props, key)
    if value is None:
        return []
    deps = list(getattr(res, "property_dependencies", {}).get(key, []) or []) or list(res.dependencies or [])
    deps = [d for d in deps if d.resource_type in types]
    if value is UNKNOWN:
        return deps or None
    values = items(value) if not isinstance(value, str) else (value.split(",") if split_commas else [value])
    found = []
    for v in values:
        if v is UNKNOWN:
            if not deps:
                return None
            found += deps
            continue
        r = view.find(as_str(v).strip() if as_str(v) else None, types, keys=("id", "fsId", "name", "bucket"))
        if r is not None:
            found.append(r)
    return found


# ---- snapshot-schedule ---------------------------------------------------------------------------

def _dlm_covers(policy: Any, volume_tags: dict[str, str]) -> tuple[bool, int]:
    """(does the DLM policy target this volume?, snapshots it keeps; -1 = unknown)."""
    p = policy.props
    if get(p, "state") == "DISABLED":
        return False, 0
    kinds = get(p, "policyDetails.resourceTypes")
    kinds = items(kinds) if known(kinds) else []
    if kinds and UNKNOWN not in kinds and "VOLUME" not in kinds:
        return False, 0
    targets = get(p, "policyDetails.targetTags")
    if targets is UNKNOWN:
        return True, -1
    if not hasattr(targets, "keys") or not list(targets.keys()):
        return False, 0
    for k in targets.keys():
        have = get(volume_tags, (k,))
        if have is not UNKNOWN and have != get(targets, (k,)):
            return False, 0
    keep = [as_int(get(s, "retainRule.count")) or as_int(get(s, "retainRule.interval"))
            for s in items(get(p, "policyDetails.schedules"))]
    keep = [k for k in keep if k is not None]
    return True, max(keep) if keep else -1


def _snapshot_schedule(args: Any, report_violation: Any) -> None:
    view = StackView(args.resources)
    min_keep = as_int(config_value(args, "minRetention", 1)) or 1
    min_days = as_int(config_value(args, "minBackupRetentionDays", 1)) or 1
    dlm = view.of_type(AWS_DLM)
    for vol in view.of_type(AWS_VOLUME):
        tags = get(vol.props, "tags")
        if tags is UNKNOWN:
            continue
        covers = [c for c in (_dlm_covers(p, tags if tags is not None else {}) for p in dlm) if c[0]]
        if not covers:
            report_violation(
                f"EBS volume '{short(vol.urn)}' matches no enabled DLM lifecycle policy; add an "
                f"aws.dlm.LifecyclePolicy whose policy_details.target_tags match the volume's tags.", vol.urn)
        elif all(0 <= keep < min_keep for _, keep in covers):
            report_violation(
                f"EBS volume '{short(vol.urn)}' keeps only {max(k for _, k in covers)} snapshots; raise the DLM "
                f"retain_rule count to at least {min_keep}.", vol.urn)
    linked = {t.urn for dra in view.of_type(AWS_DRA) for t in (_targets(view, dra, "fileSystemId", (AWS_LUSTRE,)) or [])}
    for fs in view.of_type(AWS_LUSTRE):
        deployment = as_str(get(fs.props, "deploymentType")) or ""
        if deployment.startswith("SCRATCH"):
            continue  # scratch file systems cannot be backed up; they hold nothing that must survive
        if fs.urn in linked:
            continue  # FSx cannot back up a file system linked to S3; the bucket is its durable copy
        days = get(fs.props, "automaticBackupRetentionDays")
        if days is UNKNOWN:
            continue
        if (as_int(days) or 0) < min_days:
            report_violation(
                f"FSx for Lustre '{short(fs.urn)}' has automatic backups "
                f"{'off' if not as_int(days) else f'kept {as_int(days)} days'}; set "
                f"automatic_backup_retention_days to at least {min_days}.", fs.urn)
    _tencent_schedules(view, TC_DISK, TC_SNAPSHOT_ATTACHMENT, ("storageId", "storageIds"), "snapshotPolicyId",
                       TC_SNAPSHOT_POLICY, "retentionDays", 7, min_keep, "CBS disk", "cbs.SnapshotPolicyAttachment",
                       report_violation)
    _tencent_schedules(view, TC_CFS, TC_CFS_ATTACHMENT, ("fileSystemIds",), "autoSnapshotPolicyId",
                       TC_CFS_POLICY, "aliveDays", None, min_keep, "CFS file system",
                       "cfs.AutoSnapshotPolicyAttachment", report_violation)


def _tencent_schedules(view: StackView, target_type: str, attachment_type: str, keys: Iterable[str],
                       policy_key: str, policy_type: str, retention_key: str, retention_default: Any,
                       min_keep: int, label: str, fix: str, report_violation: Any) -> None:
    kept: dict[str, list[int]] = {}
    uncertain = False
    for att in view.of_type(attachment_type):
        policy = view.ref(att, policy_key, (policy_type,)).resource
        days = as_int(get(policy.props, retention_key, retention_default)) if policy is not None else None
        for key in keys:
            targets = _targets(view, att, key, (target_type,), split_commas=True)
            uncertain = uncertain or targets is None
            for target in targets or []:
                kept.setdefault(target.urn, []).append(-1 if days is None or days == 0 else days)
    for res in view.of_type(target_type):
        if res.urn not in kept:
            if uncertain:
                continue  # an attachment's target is unknown until the update
            report_violation(
                f"{label} '{short(res.urn)}' has no snapshot policy; attach one with a {fix}.", res.urn)
        elif all(0 <= d < min_keep for d in kept[res.urn]):
            report_violation(
                f"{label} '{short(res.urn)}' keeps snapshots only {max(kept[res.urn])} days; keep them at least "
                f"{min_keep} days.", res.urn)


snapshot_schedule = StackValidationPolicy(
    name="snapshot-schedule",
    description="Every persistent disk and file system has a snapshot or backup schedule.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_snapshot_schedule,
    config_schema=PolicyConfigSchema(properties={
        "minRetention": {
            "type": "integer", "minimum": 1, "default": 1,
            "description": "Snapshots kept per disk (AWS DLM count) or days kept (Tencent CBS/CFS).",
        },
        "minBackupRetentionDays": {
            "type": "integer", "minimum": 1, "maximum": 90, "default": 1,
            "description": "Days of FSx for Lustre automatic backups (persistent deployment types).",
        },
    }),
    remediation_steps="AWS: a DLM lifecycle policy targeting the disks' tags, and "
                      "automatic_backup_retention_days on FSx. Tencent: cbs.SnapshotPolicy + attachment, "
                      "cfs.AutoSnapshotPolicy + attachment.",
)


# ---- storage-encrypted --------------------------------------------------------------------------------

def _encryption_problems(args: Any, cmk: bool) -> Iterable[str]:
    t, p = args.resource_type, args.props

    def flag(value: Any, what: str) -> Iterable[str]:
        if value is not UNKNOWN and as_bool(value) is not True:
            yield what

    if t in (AWS_VOLUME, AWS_EFS):
        yield from flag(get(p, "encrypted"), "set encrypted=True")
        if cmk and get(p, "kmsKeyId") is None:
            yield "set kms_key_id to a customer-managed KMS key"
    elif t == "aws:ec2/launchTemplate:LaunchTemplate":
        for m in items(get(p, "blockDeviceMappings")):
            if get(m, "ebs") is not None:
                yield from flag(get(m, "ebs.encrypted"),
                                f"set ebs.encrypted=True on block device {as_str(get(m, 'deviceName')) or '?'}")
    elif t == "aws:ec2/instance:Instance":
        root = get(p, "rootBlockDevice")
        if root is not None:
            yield from flag(get(root, "encrypted"), "set root_block_device.encrypted=True")
        elif get(p, "launchTemplate") is None:
            yield "declare root_block_device with encrypted=True (or launch it from an encrypted launch template)"
        for d in items(get(p, "ebsBlockDevices")):
            yield from flag(get(d, "encrypted"), f"set encrypted=True on {as_str(get(d, 'deviceName')) or 'an EBS block device'}")
    elif t == AWS_LUSTRE:
        # FSx for Lustre always encrypts at rest; only the key is a choice.
        if cmk and get(p, "kmsKeyId") is None:
            yield "set kms_key_id to a customer-managed KMS key"
    elif t in AWS_BUCKETS:
        # Since January 2023 S3 encrypts every new object with SSE-S3 by default; only the key is a choice.
        algo = get(p, "serverSideEncryptionConfiguration.rule.applyServerSideEncryptionByDefault.sseAlgorithm")
        if cmk and known(algo) and not str(algo).startswith("aws:kms"):
            yield "use sse_algorithm 'aws:kms' with a customer-managed key"
    elif t in AWS_SSE:
        for rule in items(get(p, "rules")):
            algo = get(rule, "applyServerSideEncryptionByDefault.sseAlgorithm")
            if cmk and known(algo) and not str(algo).startswith("aws:kms"):
                yield "use sse_algorithm 'aws:kms' with a customer-managed key"
    elif t == TC_DISK:
        yield from flag(get(p, "encrypt"), "set encrypt=True")
        if cmk and get(p, "kmsKeyId") is None:
            yield "set kms_key_id to a customer-managed KMS key"
    elif t == "tencentcloud:Instance/instance:Instance":
        for i, d in enumerate(items(get(p, "dataDisks"))):
            yield from flag(get(d, "encrypt"), f"set encrypt=True on data disk {i}")
    elif t == TC_BUCKET:
        algo = get(p, "encryptionAlgorithm")
        if algo is not UNKNOWN and not as_str(algo):
            yield "set encryption_algorithm ('AES256' or 'KMS')"
        elif cmk and known(algo) and "kms" not in str(algo).lower():
            yield "set encryption_algorithm 'KMS' with kms_id"


def _storage_encrypted(args: Any, report_violation: Any) -> None:
    cmk = config_value(args, "requireCustomerManagedKey", False) is True
    for fix in dict.fromkeys(_encryption_problems(args, cmk)):
        report_violation(f"'{args.name}' ({args.resource_type.rsplit(':', 1)[-1]}) stores data unencrypted or "
                         f"with the wrong key; {fix}.")


storage_encrypted = ResourceValidationPolicy(
    name="storage-encrypted",
    description="Disks, file systems and buckets are encrypted at rest.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_storage_encrypted,
    config_schema=PolicyConfigSchema(properties={
        "requireCustomerManagedKey": {
            "type": "boolean", "default": False,
            "description": "Also require a customer-managed KMS key (not the provider's default key).",
        },
    }),
    remediation_steps="Set encrypted / encrypt on every disk, encryption_algorithm on COS buckets; for "
                      "customer-managed keys pass kms_key_id.",
)


# ---- checkpoint-bucket-private -----------------------------------------------------------------------

_PAB_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")


def _checkpoint_bucket_private(args: Any, report_violation: Any) -> None:
    view = StackView(args.resources)
    need_versioning = config_value(args, "requireVersioning", True) is not False
    blocks: dict[str, list[Any]] = {}
    versioned: set[str] = set()
    unsure_blocks = unsure_versions = False  # some block / versioning targets a bucket unknown until the update
    for pab in view.of_type(AWS_PAB):
        targets = _targets(view, pab, "bucket", AWS_BUCKETS)
        unsure_blocks = unsure_blocks or targets is None
        for b in targets or []:
            blocks.setdefault(b.urn, []).append(pab)
    for kinds, buckets, path in ((AWS_VERSIONING, AWS_BUCKETS, "versioningConfiguration.status"),
                                 ((TC_BUCKET_VERSION,), (TC_BUCKET,), "status")):
        for v in view.of_type(*kinds):
            status = get(v.props, path)
            if status is UNKNOWN or status == "Enabled":
                targets = _targets(view, v, "bucket", buckets)
                unsure_versions = unsure_versions or targets is None
                versioned.update(b.urn for b in targets or [])
    for b in view.of_type(*AWS_BUCKETS):
        name = short(b.urn)
        pabs = blocks.get(b.urn, [])
        if not pabs:
            if not unsure_blocks:
                report_violation(f"S3 bucket '{name}' has no public access block; add an "
                                 f"aws.s3.BucketPublicAccessBlock with all four settings True.", b.urn)
        else:
            off = [f for f in _PAB_FLAGS if not any(get(p.props, f) is UNKNOWN or as_bool(get(p.props, f)) for p in pabs)]
            if off:
                report_violation(f"S3 bucket '{name}' has a public access block with {', '.join(off)} off; "
                                 f"set all four to True.", b.urn)
        inline = get(b.props, "versioning.enabled")
        if need_versioning and b.urn not in versioned and not unsure_versions and inline is not UNKNOWN \
                and as_bool(inline) is not True:
            report_violation(f"S3 bucket '{name}' is not versioned, so an overwritten checkpoint is lost; add an "
                             f"aws.s3.BucketVersioning with status 'Enabled'.", b.urn)
    for b in view.of_type(TC_BUCKET):
        name = short(b.urn)
        acl = get(b.props, "acl")
        if known(acl) and acl != "private":
            report_violation(f"COS bucket '{name}' has acl '{acl}'; set acl='private'.", b.urn)
        enabled = get(b.props, "versioningEnable")
        if need_versioning and b.urn not in versioned and not unsure_versions and enabled is not UNKNOWN \
                and as_bool(enabled) is not True:
            report_violation(f"COS bucket '{name}' is not versioned, so an overwritten checkpoint is lost; set "
                             f"versioning_enable=True.", b.urn)


checkpoint_bucket_private = StackValidationPolicy(
    name="checkpoint-bucket-private",
    description="Buckets block public access and keep object versions.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_checkpoint_bucket_private,
    config_schema=PolicyConfigSchema(properties={
        "requireVersioning": {
            "type": "boolean", "default": True,
            "description": "Require versioning as well as private access.",
        },
    }),
    remediation_steps="S3: BucketPublicAccessBlock (all four True) + BucketVersioning(Enabled). "
                      "COS: acl='private', versioning_enable=True.",
)


# ---- stateful-protected ------------------------------------------------------------------------------

def _stateful_protected(args: Any, report_violation: Any) -> None:
    types = [t for t in config_list(args, "types") if isinstance(t, str)] or STATEFUL_TYPES
    if args.resource_type not in types:
        return
    if not getattr(args.opts, "protect", False):
        report_violation(
            f"'{args.name}' ({args.resource_type.rsplit(':', 1)[-1]}) holds data but is not protected, so a "
            f"replacement or `pulumi destroy` deletes it; create it with "
            f"ResourceOptions(protect=True).")


stateful_protected = ResourceValidationPolicy(
    name="stateful-protected",
    description="File systems, data disks and buckets carry Pulumi's protect option.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_stateful_protected,
    config_schema=PolicyConfigSchema(properties={
        "types": {
            "type": "array", "items": {"type": "string"}, "default": STATEFUL_TYPES,
            "description": "Resource type tokens that hold data and must be protected.",
        },
    }),
    remediation_steps="Pass opts=ResourceOptions(protect=True); unprotect explicitly before a planned deletion.",
)
