"""Storage guardrails: snapshot schedules, encryption, private versioned buckets, protected state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

import json
import re

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy, StackValidationPolicy

from .props import UNKNOWN, as_bool, as_int, as_str, get, items, known, short, values
from .stack import (AWS_ASG, AWS_BATCH, AWS_FLEET, AWS_INSTANCE, AWS_LAUNCH_CONFIG, AWS_LAUNCH_TEMPLATE,
                    AWS_NODE_GROUP, AWS_SPOT_FLEET, AWS_SPOT_REQUEST, TC_INSTANCE, TC_K8S_CLUSTER, TC_NATIVE_POOL,
                    TC_NODE_POOL, TC_SCALE_WORKER, StackView, config_value, report_unknowns, strict, view_of)

AWS_VOLUME = "aws:ebs/volume:Volume"
AWS_LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
AWS_FSX_WINDOWS = "aws:fsx/windowsFileSystem:WindowsFileSystem"
AWS_FSX_ONTAP = "aws:fsx/ontapFileSystem:OntapFileSystem"
AWS_FSX_ONTAP_VOLUME = "aws:fsx/ontapVolume:OntapVolume"
AWS_FSX_OPENZFS = "aws:fsx/openZfsFileSystem:OpenZfsFileSystem"
AWS_FSX_OPENZFS_VOLUME = "aws:fsx/openZfsVolume:OpenZfsVolume"
AWS_FSX = (AWS_LUSTRE, AWS_FSX_WINDOWS, AWS_FSX_ONTAP, AWS_FSX_ONTAP_VOLUME, AWS_FSX_OPENZFS, AWS_FSX_OPENZFS_VOLUME)
AWS_EFS = "aws:efs/fileSystem:FileSystem"
AWS_BACKUP_PLAN = "aws:backup/plan:Plan"
AWS_BACKUP_SELECTION = "aws:backup/selection:Selection"
AWS_EBS_DEFAULT = "aws:ebs/encryptionByDefault:EncryptionByDefault"
AWS_BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
AWS_BUCKET_ACL = ("aws:s3/bucketAcl:BucketAcl", "aws:s3/bucketAclV2:BucketAclV2")
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
TC_BUCKET_POLICY = "tencentcloud:Cos/bucketPolicy:BucketPolicy"
TC_DISK_SET = "tencentcloud:Cbs/storageSet:StorageSet"

# Everything that holds data a replacement or `pulumi destroy` would lose: every FSx flavour (Lustre,
# Windows File Server, ONTAP file systems and volumes, OpenZFS file systems and volumes), EFS, EBS, S3;
# on Tencent CBS disks (single and sets), CFS (also CFS Turbo) and COS.
STATEFUL_TYPES = [AWS_VOLUME, *AWS_FSX, AWS_EFS, *AWS_BUCKETS, TC_DISK, TC_DISK_SET, TC_CFS, TC_BUCKET]


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


def _arn_like(res: Any) -> str:
    """The resource's ARN, or one with placeholders for what a plan does not know (for wildcard matching)."""
    arn = as_str(get(res.props, "arn"))
    if arn:
        return arn
    rid = as_str(get(res.props, "id")) or "x"
    if res.resource_type == AWS_VOLUME:
        return f"arn:aws:ec2:x:x:volume/{rid}"
    if res.resource_type == AWS_EFS:
        return f"arn:aws:elasticfilesystem:x:x:file-system/{rid}"
    if res.resource_type in (AWS_FSX_ONTAP_VOLUME, AWS_FSX_OPENZFS_VOLUME):
        return f"arn:aws:fsx:x:x:volume/x/{rid}"
    return f"arn:aws:fsx:x:x:file-system/{rid}"


def _wildcard(pattern: str) -> "re.Pattern[str]":
    return re.compile("^" + ".*".join(re.escape(part) for part in pattern.split("*")) + "$")


def _backup_selected(view: StackView) -> tuple[set[str], bool]:
    """URNs of disks and file systems an AWS Backup selection of a plan with rules covers, and whether some
    selection could not be read (its targets unknown until the update)."""
    selections = view.of_type(AWS_BACKUP_SELECTION)
    if not selections:
        return set(), False
    candidates = view.of_type(AWS_VOLUME, *AWS_FSX, AWS_EFS)
    arns = [(c, _arn_like(c)) for c in candidates]
    by_exact: dict[str, list[str]] = {}
    for c, arn in arns:
        for key in {arn, as_str(get(c.props, "id")) or ""} - {""}:
            by_exact.setdefault(key, []).append(c.urn)
    by_tag: dict[tuple[str, Any], list[str]] = {}
    for c in candidates:
        tags = get(c.props, "tags")
        if hasattr(tags, "keys"):
            for k in tags.keys():
                v = get(tags, (k,))
                by_tag.setdefault((str(k), v if isinstance(v, str) else UNKNOWN if v is UNKNOWN else None), []).append(c.urn)

    def matching(text: str) -> list[str]:
        if "*" not in text:
            return by_exact.get(text, [])
        match = _wildcard(text)
        return [c.urn for c, arn in arns if match.match(arn)]

    covered: set[str] = set()
    unsure = False
    for sel in selections:
        plan_ref = view.ref(sel, "planId", (AWS_BACKUP_PLAN,), keys=("id",))
        if plan_ref.resource is not None:
            rules = get(plan_ref.resource.props, "rules")
            if rules is not UNKNOWN and not items(rules):
                continue  # a plan without rules backs up nothing
        mine: set[str] = set()
        resources = get(sel.props, "resources")
        deps = [d for d in (getattr(sel, "property_dependencies", {}) or {}).get("resources", []) or []
                if d.resource_type in (AWS_VOLUME, *AWS_FSX, AWS_EFS)]
        for v in ([UNKNOWN] if resources is UNKNOWN else items(resources)):
            if v is UNKNOWN:
                if deps:
                    mine.update(d.urn for d in deps)
                else:
                    unsure = True
            elif as_str(v):
                mine.update(matching(as_str(v)))
        for tag in items(get(sel.props, "selectionTags")):
            key, value = as_str(get(tag, "key")), get(tag, "value")
            if key is None:
                continue
            if value is UNKNOWN:
                mine.update(u for (k, _), urns in by_tag.items() if k == key for u in urns)
            else:
                mine.update(by_tag.get((key, value), []))
                mine.update(by_tag.get((key, UNKNOWN), []))
        for text in (as_str(v) for v in items(get(sel.props, "notResources"))):
            if text:
                mine -= set(matching(text))
        covered |= mine
    return covered, unsure


def _snapshot_schedule(args: Any, report_violation: Any) -> None:
    view = view_of(args.resources)
    min_keep = as_int(config_value(args, "minRetention", 1)) or 1
    min_days = as_int(config_value(args, "minBackupRetentionDays", 1)) or 1
    dlm = view.of_type(AWS_DLM)
    backed, backup_unsure = _backup_selected(view)
    for vol in view.of_type(AWS_VOLUME):
        if vol.urn in backed or backup_unsure:
            continue  # AWS Backup takes its snapshots
        tags = get(vol.props, "tags")
        if tags is UNKNOWN:
            continue
        covers = [c for c in (_dlm_covers(p, tags if tags is not None else {}) for p in dlm) if c[0]]
        if not covers:
            report_violation(
                f"EBS volume '{short(vol.urn)}' matches no enabled DLM lifecycle policy and no AWS Backup selection; "
                f"add an aws.dlm.LifecyclePolicy whose policy_details.target_tags match the volume's tags, or an "
                f"aws.backup.Selection of a backup plan that lists it.", vol.urn)
        elif all(0 <= keep < min_keep for _, keep in covers):
            report_violation(
                f"EBS volume '{short(vol.urn)}' keeps only {max(k for _, k in covers)} snapshots; raise the DLM "
                f"retain_rule count to at least {min_keep}.", vol.urn)
    linked = {t.urn for dra in view.of_type(AWS_DRA) for t in (_targets(view, dra, "fileSystemId", (AWS_LUSTRE,)) or [])}
    for fs in view.of_type(AWS_LUSTRE):
        if fs.urn in backed or backup_unsure:
            continue
        deployment = as_str(get(fs.props, "deploymentType")) or ""
        if deployment.startswith("SCRATCH"):
            continue  # scratch file systems cannot be backed up; they hold nothing that must survive
        if fs.urn in linked or get(fs.props, "importPath") is not None or get(fs.props, "exportPath") is not None:
            # FSx cannot back up a file system linked to an S3 data repository (FSx for Lustre user guide,
            # "Protecting your data with backups"); the bucket is its durable copy.
            continue
        days = get(fs.props, "automaticBackupRetentionDays")
        if days is UNKNOWN:
            continue
        if (as_int(days) or 0) < min_days:
            report_violation(
                f"FSx for Lustre '{short(fs.urn)}' has automatic backups "
                f"{'off' if not as_int(days) else f'kept {as_int(days)} days'}; set "
                f"automatic_backup_retention_days to at least {min_days} (or select it in an AWS Backup plan).", fs.urn)
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
    remediation_steps="AWS: a DLM lifecycle policy targeting the disks' tags or an AWS Backup plan and "
                      "selection, and automatic_backup_retention_days on FSx. Tencent: cbs.SnapshotPolicy + attachment, "
                      "cfs.AutoSnapshotPolicy + attachment.",
)


# ---- storage-encrypted --------------------------------------------------------------------------------

_EBS_KINDS = (AWS_VOLUME, AWS_LAUNCH_TEMPLATE, AWS_INSTANCE, AWS_LAUNCH_CONFIG, AWS_SPOT_FLEET)
ENCRYPTED_TYPES = (*_EBS_KINDS, AWS_EFS, *AWS_FSX, *AWS_BUCKETS, *AWS_SSE, TC_DISK, TC_DISK_SET, TC_INSTANCE,
                   TC_NODE_POOL, TC_K8S_CLUSTER, TC_SCALE_WORKER, TC_NATIVE_POOL, TC_BUCKET)


def _encryption_problems(t: str, p: Any, cmk: bool, ebs_default: bool, ebs_default_cmk: bool) -> Iterable[str]:
    """What is unencrypted about one resource. `ebs_default`: the stack turns on EBS encryption by default
    for the account and region (aws.ebs.EncryptionByDefault), so every new EBS volume and snapshot copy is
    encrypted whatever the resource says (https://docs.aws.amazon.com/ebs/latest/userguide/encryption-by-default.html)."""
    if t in _EBS_KINDS and cmk and ebs_default_cmk:
        cmk = False  # the account's default EBS key is a customer-managed key of this stack
    if t in _EBS_KINDS:
        yield from _ebs_encryption_problems(t, p, cmk, ebs_default)
    elif t == AWS_EFS or t in AWS_FSX or t in AWS_BUCKETS or t in AWS_SSE:
        yield from _aws_store_encryption_problems(t, p, cmk)
    else:
        yield from _tencent_encryption_problems(t, p, cmk)


class _IfStrict(str):
    """A fix for a value unknown until the update: reported only in strict mode (the caller filters)."""


def _unless_true(value: Any, what: str) -> Iterable[str]:
    """`what` (the fix) unless `value` is known to be true; for an unknown value, the fix marked _IfStrict."""
    if value is UNKNOWN:
        yield _IfStrict(f"{what} (the value is unknown until the update, and strict mode accepts nothing it "
                        f"cannot see)")
    elif as_bool(value) is not True:
        yield what


def _ebs_flag(value: Any, what: str, ebs_default: bool) -> Iterable[str]:
    """`what` unless `value` is true or EBS encryption by default covers it anyway."""
    if not ebs_default:
        yield from _unless_true(value, what)


def _ebs_encryption_problems(t: str, p: Any, cmk: bool, ebs_default: bool) -> Iterable[str]:
    """`_encryption_problems` of the resources whose disks are EBS volumes (`_EBS_KINDS`)."""
    if t == AWS_VOLUME:
        yield from _ebs_flag(get(p, "encrypted"), "set encrypted=True", ebs_default)
        if cmk and get(p, "kmsKeyId") is None:
            yield "set kms_key_id to a customer-managed KMS key"
    elif t == AWS_LAUNCH_TEMPLATE:
        for m in items(get(p, "blockDeviceMappings")):
            if get(m, "ebs") is not None:
                yield from _ebs_flag(get(m, "ebs.encrypted"),
                                     f"set ebs.encrypted=True on block device {as_str(get(m, 'deviceName')) or '?'}",
                                     ebs_default)
    elif t == AWS_INSTANCE:
        root = get(p, "rootBlockDevice")
        if root is not None:
            yield from _ebs_flag(get(root, "encrypted"), "set root_block_device.encrypted=True", ebs_default)
        elif get(p, "launchTemplate") is None and not ebs_default:
            yield "declare root_block_device with encrypted=True (or launch it from an encrypted launch template)"
        for d in items(get(p, "ebsBlockDevices")):
            yield from _ebs_flag(get(d, "encrypted"),
                                 f"set encrypted=True on {as_str(get(d, 'deviceName')) or 'an EBS block device'}",
                                 ebs_default)
    elif t == AWS_LAUNCH_CONFIG:
        root = get(p, "rootBlockDevice")
        if root is not None:
            yield from _ebs_flag(get(root, "encrypted"), "set root_block_device.encrypted=True", ebs_default)
        for d in items(get(p, "ebsBlockDevices")):
            yield from _ebs_flag(get(d, "encrypted"),
                                 f"set encrypted=True on {as_str(get(d, 'deviceName')) or 'an EBS block device'}",
                                 ebs_default)
    elif t == AWS_SPOT_FLEET:
        for spec in items(get(p, "launchSpecifications")):
            for d in items(get(spec, "rootBlockDevices")) + items(get(spec, "ebsBlockDevices")):
                yield from _ebs_flag(get(d, "encrypted"),
                                     "set encrypted=True on every block device of the launch specifications",
                                     ebs_default)


def _aws_store_encryption_problems(t: str, p: Any, cmk: bool) -> Iterable[str]:
    """`_encryption_problems` of EFS, FSx and S3."""
    if t == AWS_EFS:
        yield from _unless_true(get(p, "encrypted"), "set encrypted=True")
        if cmk and get(p, "kmsKeyId") is None:
            yield "set kms_key_id to a customer-managed KMS key"
    elif t in AWS_FSX:
        # FSx encrypts every file system and volume at rest; only the key is a choice.
        if cmk and t not in (AWS_FSX_ONTAP_VOLUME, AWS_FSX_OPENZFS_VOLUME) and get(p, "kmsKeyId") is None:
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


def _tencent_encryption_problems(t: str, p: Any, cmk: bool) -> Iterable[str]:
    """`_encryption_problems` of Tencent Cloud disks, instances, node pools, clusters and COS buckets."""
    if t == TC_DISK:
        yield from _unless_true(get(p, "encrypt"), "set encrypt=True")
        if cmk and get(p, "kmsKeyId") is None:
            yield "set kms_key_id to a customer-managed KMS key"
    elif t == TC_INSTANCE:
        for i, d in enumerate(items(get(p, "dataDisks"))):
            yield from _unless_true(get(d, "encrypt"), f"set encrypt=True on data disk {i}")
    elif t == TC_DISK_SET:
        yield from _unless_true(get(p, "encrypt"), "set encrypt=True")
    elif t in (TC_SCALE_WORKER, TC_NATIVE_POOL):
        # (a scale worker's top-level data_disks only say how to mount: no encrypt there, provider 0.2.3)
        path = "workerConfig.dataDisks[]" if t == TC_SCALE_WORKER else "native.dataDisks[]"
        for i, d in enumerate(values(p, path)):
            yield from _unless_true(get(d, "encrypt"), f"set encrypt=True on data disk {i}")
    elif t == TC_NODE_POOL:
        for i, d in enumerate(items(get(p, "autoScalingConfig.dataDisks"))):
            yield from _unless_true(get(d, "encrypt"), f"set encrypt=True on auto_scaling_config data disk {i}")
    elif t == TC_K8S_CLUSTER:
        for w, worker in enumerate(items(get(p, "workerConfigs"))):
            for i, d in enumerate(items(get(worker, "dataDisks"))):
                yield from _unless_true(get(d, "encrypt"), f"set encrypt=True on data disk {i} of worker config {w}")
    elif t == TC_BUCKET:
        algo = get(p, "encryptionAlgorithm")
        if algo is not UNKNOWN and not as_str(algo):
            yield "set encryption_algorithm ('AES256', 'KMS' or 'SM4')"
        elif cmk and known(algo) and "kms" not in str(algo).lower():
            yield "set encryption_algorithm 'KMS' with kms_id"


def _region(res: Any) -> Optional[str]:
    """The region a resource lives in: its own `region` (pulumi-aws 7), else its provider's."""
    own = as_str(get(res.props, "region"))
    if own:
        return own
    provider = getattr(res, "provider", None)
    return as_str(get(provider.props, "region")) if provider is not None else None


def _storage_encrypted(args: Any, report_violation: Any) -> None:
    view = view_of(args.resources)
    strict_mode = strict(args)
    report_unknowns(args, view.gpu_nodes(), "storage-encrypted", report_violation)
    cmk = config_value(args, "requireCustomerManagedKey", False) is True
    # EBS encryption by default is a setting of one account and region: it covers volumes in its region only.
    defaults = {_region(d) for d in view.of_type(AWS_EBS_DEFAULT)
                if get(d.props, "enabled") is UNKNOWN or as_bool(get(d.props, "enabled")) is not False}
    default_keys = {_region(d) for d in view.of_type("aws:ebs/defaultKmsKey:DefaultKmsKey")}
    for res in view.of_type(*ENCRYPTED_TYPES):
        region = _region(res)
        ebs_default = region in defaults
        for fix in dict.fromkeys(_encryption_problems(res.resource_type, res.props, cmk, ebs_default,
                                                      ebs_default and region in default_keys)):
            if isinstance(fix, _IfStrict) and not strict_mode:
                continue
            report_violation(f"'{short(res.urn)}' ({res.resource_type.rsplit(':', 1)[-1]}) stores data unencrypted "
                             f"or with the wrong key; {fix}.", res.urn)
    _root_from_the_ami(view, defaults, report_violation)
    for node in view.gpu_nodes():
        outside = [t.outside for t in node.templates if t.outside is not None]
        if outside and node.resource.resource_type in (AWS_INSTANCE, AWS_SPOT_REQUEST, AWS_ASG, AWS_FLEET,
                                                       AWS_SPOT_FLEET, AWS_NODE_GROUP, AWS_BATCH) \
                and _region(node.resource) not in defaults:
            report_violation(
                f"GPU node '{node.label}' launches from launch template {outside[0]}, which this stack does not "
                f"define, so the encryption of its disks cannot be checked; define the launch template in the "
                f"stack (block devices with encrypted=True) or turn on aws.ebs.EncryptionByDefault.", node.urn)


# Root device names of Linux AMIs (EC2 user guide, "Device names for volumes on Amazon EC2 instances":
# /dev/sda1 or /dev/xvda).
ROOT_DEVICES = frozenset({"/dev/sda1", "/dev/xvda", "/dev/sda"})


def _root_from_the_ami(view: StackView, defaults: set, report_violation: Any) -> None:
    """A machine launched from a launch template whose root volume nothing declares (the instance has no
    root_block_device, the template no mapping for a root device name) gets the AMI's snapshot as it is,
    encrypted only if it was (EBS user guide, "Encryption by default" aside)."""
    for node in view.capacity():
        templates = [t.resource for t in node.templates if t.resource is not None
                     and t.resource.resource_type == AWS_LAUNCH_TEMPLATE]
        if not templates or get(node.props, "rootBlockDevice") is not None or _region(node.resource) in defaults:
            continue
        names = {as_str(get(m, "deviceName")) for lt in templates for m in items(get(lt.props, "blockDeviceMappings"))}
        if any(get(lt.props, "blockDeviceMappings") is UNKNOWN for lt in templates) or names & ROOT_DEVICES:
            continue
        report_violation(
            f"'{node.label}' launches from launch template '{short(templates[0].urn)}', and neither declares its "
            f"root volume, so it copies the AMI's snapshot, encrypted or not; declare root_block_device "
            f"(encrypted=True) or a block device mapping for the root device ({' or '.join(sorted(ROOT_DEVICES))}) "
            f"with ebs.encrypted=True.", node.urn)


storage_encrypted = StackValidationPolicy(
    name="storage-encrypted",
    description="Disks, file systems and buckets are encrypted at rest (EBS encryption by default in the stack counts).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_storage_encrypted,
    config_schema=PolicyConfigSchema(properties={
        "requireCustomerManagedKey": {
            "type": "boolean", "default": False,
            "description": "Also require a customer-managed KMS key (not the provider's default key).",
        },
    }),
    remediation_steps="Set encrypted / encrypt on every disk, encryption_algorithm on COS buckets, or turn on "
                      "aws.ebs.EncryptionByDefault in the stack; for customer-managed keys pass kms_key_id.",
)


# ---- checkpoint-bucket-private -----------------------------------------------------------------------

_PAB_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")

# Grantees that mean "anyone": S3 (https://docs.aws.amazon.com/AmazonS3/latest/userguide/acl-overview.html,
# predefined groups) and COS (tencentcloud provider v1.82.42, services/cos/service_tencentcloud_cos.go
# PUBLIC_GRANTEE; AuthenticatedUsers is any Tencent Cloud account).
_PUBLIC_GRANTEES = ("http://acs.amazonaws.com/groups/global/AllUsers",
                    "http://acs.amazonaws.com/groups/global/AuthenticatedUsers",
                    "http://cam.qcloud.com/groups/global/AllUsers",
                    "http://cam.qcloud.com/groups/global/AuthenticatedUsers")
_PUBLIC_CANNED = ("public-read", "public-read-write", "authenticated-read")
# Principals that mean "anyone": "*" (S3 and COS) and COS's anonymous user
# (https://intl.cloud.tencent.com/document/product/436/18023: "qcs::cam::anyone:anyone").
_ANYONE = ("*", "qcs::cam::anyone:anyone")


def _policy_doc(value: Any) -> Optional[Any]:
    """A bucket policy document (JSON text or object); None when unknown or unreadable."""
    if value is None or value is UNKNOWN:
        return None
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return None
    return value


def _statements(doc: Any) -> list[Any]:
    st = get(doc, "Statement")
    if st is None:
        st = get(doc, "statement")
    if isinstance(st, dict) or hasattr(st, "keys"):
        return [st]
    return items(st)


def _principals(st: Any) -> list[str]:
    out: list[str] = []
    for key in ("Principal", "principal", "NotPrincipal"):
        pr = get(st, key)
        if pr is None:
            continue
        if isinstance(pr, str):
            out.append(pr)
        elif hasattr(pr, "keys"):
            for k in pr.keys():
                v = get(pr, (k,))
                out += [v] if isinstance(v, str) else [x for x in items(v) if isinstance(x, str)]
        if key == "NotPrincipal":
            out.append("*")  # Allow with NotPrincipal: everyone but the listed ones
    return out


def _condition_keys(st: Any) -> set[str]:
    cond = get(st, "Condition")
    if cond is None:
        cond = get(st, "condition")
    keys: set[str] = set()
    if hasattr(cond, "keys"):
        for op in cond.keys():
            inner = get(cond, (op,))
            if hasattr(inner, "keys"):
                keys.update(str(k).lower() for k in inner.keys())
            else:
                keys.add("?")
    return keys


def public_statements(doc: Any) -> list[str]:
    """Sids (or positions) of statements that allow anyone, with no condition that narrows who."""
    out = []
    for i, st in enumerate(_statements(doc)):
        effect = str(get(st, "Effect") or get(st, "effect") or "").lower()
        if effect != "allow":
            continue
        if not any(p in _ANYONE for p in _principals(st)):
            continue
        if _condition_keys(st) - {"aws:securetransport"}:
            continue  # a condition on source IP, VPC, account... narrows it
        out.append(as_str(get(st, "Sid")) or f"statement {i}")
    return out


def tls_only(doc: Any) -> bool:
    """FSBP S3.5 (https://docs.aws.amazon.com/securityhub/latest/userguide/s3-controls.html#s3-5): a statement
    denies every action to everyone when aws:SecureTransport is false."""
    for st in _statements(doc):
        if str(get(st, "Effect") or "").lower() != "deny" or not any(p == "*" for p in _principals(st)):
            continue
        actions = get(st, "Action")
        actions = [actions] if isinstance(actions, str) else items(actions)
        if not any(a in ("*", "s3:*") for a in actions):
            continue
        cond = get(st, "Condition")
        for op in ("Bool", "BoolIfExists"):
            v = get(get(cond, (op,)), ("aws:SecureTransport",))
            if v is UNKNOWN or v is False or (isinstance(v, str) and v.lower() == "false") or \
                    any(x is False or (isinstance(x, str) and x.lower() == "false") for x in items(v)):
                return True
    return False


def _acl_public(acl: Any, grants: Any, body: Any) -> Optional[str]:
    """What makes an ACL public, or None."""
    if known(acl) and as_str(acl) in _PUBLIC_CANNED:
        return f"acl '{acl}'"
    for g in items(grants):
        for key in ("uri", "grantee.uri"):
            uri = as_str(get(g, key))
            if uri in _PUBLIC_GRANTEES:
                return f"a grant to {uri}"
    text = as_str(body)
    if text:
        for uri in _PUBLIC_GRANTEES:
            if uri in text:
                return f"an ACL body granting {uri.rsplit('/', 1)[-1]}"
    return None


def _bucket_targets(view: StackView, res: Any, types: tuple[str, ...]) -> Optional[list[Any]]:
    return _targets(view, res, "bucket", types)


def _checkpoint_bucket_private(args: Any, report_violation: Any) -> None:
    view = view_of(args.resources)
    need_versioning = config_value(args, "requireVersioning", True) is not False
    need_tls = config_value(args, "requireTls", True) is not False
    facts = _BucketFacts()
    _read_public_access_blocks(view, facts)
    _read_versioning(view, facts)
    _check_bucket_policies(view, facts, report_violation)
    _check_bucket_acls(view, report_violation)
    for b in view.of_type(*AWS_BUCKETS):
        _check_s3_bucket(b, facts, need_tls, need_versioning, report_violation)
    for b in view.of_type(TC_BUCKET):
        _check_cos_bucket(b, facts, need_versioning, report_violation)


@dataclass
class _BucketFacts:
    """What the stack's other resources say about its buckets, by bucket URN."""
    blocks: dict[str, list[Any]] = field(default_factory=dict)
    versioned: set[str] = field(default_factory=set)
    tls: set[str] = field(default_factory=set)
    # some target is a bucket unknown until the update
    unsure_blocks: bool = False
    unsure_versions: bool = False
    unsure_tls: bool = False


def _read_public_access_blocks(view: StackView, facts: _BucketFacts) -> None:
    for pab in view.of_type(AWS_PAB):
        targets = _bucket_targets(view, pab, AWS_BUCKETS)
        facts.unsure_blocks = facts.unsure_blocks or targets is None
        for b in targets or []:
            facts.blocks.setdefault(b.urn, []).append(pab)


def _read_versioning(view: StackView, facts: _BucketFacts) -> None:
    for kinds, buckets, path in ((AWS_VERSIONING, AWS_BUCKETS, "versioningConfiguration.status"),
                                 ((TC_BUCKET_VERSION,), (TC_BUCKET,), "status")):
        for v in view.of_type(*kinds):
            status = get(v.props, path)
            if status is UNKNOWN or status == "Enabled":
                targets = _bucket_targets(view, v, buckets)
                facts.unsure_versions = facts.unsure_versions or targets is None
                facts.versioned.update(b.urn for b in targets or [])


def _check_bucket_policies(view: StackView, facts: _BucketFacts, report_violation: Any) -> None:
    """Bucket policies that let anyone in; the buckets whose policy requires TLS go to `facts.tls`."""
    for pol in view.of_type(AWS_BUCKET_POLICY, TC_BUCKET_POLICY):
        buckets = AWS_BUCKETS if pol.resource_type == AWS_BUCKET_POLICY else (TC_BUCKET,)
        targets = _bucket_targets(view, pol, buckets)
        raw = get(pol.props, "policy")
        doc = _policy_doc(raw)
        if targets is None:
            facts.unsure_tls = True
        if doc is None:
            if raw is UNKNOWN:
                facts.tls.update(b.urn for b in targets or [])  # the document is only known at the update
            continue
        if tls_only(doc):
            facts.tls.update(b.urn for b in targets or [])
        public = public_statements(doc)
        if public:
            where = ", ".join(repr(short(b.urn)) for b in targets or []) or "a bucket"
            report_violation(f"Bucket policy '{short(pol.urn)}' lets anyone (principal \"*\") into {where} "
                             f"({', '.join(public)}); name the accounts, roles or VPC endpoints that need access "
                             f"instead.", pol.urn)


def _check_bucket_acls(view: StackView, report_violation: Any) -> None:
    for acl in view.of_type(*AWS_BUCKET_ACL):
        why = _acl_public(get(acl.props, "acl"), get(acl.props, "accessControlPolicy.grants"), None)
        if why:
            report_violation(f"Bucket ACL '{short(acl.urn)}' makes its bucket public ({why}); use acl 'private' "
                             f"(or BucketOwnershipControls BucketOwnerEnforced, which disables ACLs).", acl.urn)


def _check_s3_bucket(b: Any, facts: _BucketFacts, need_tls: bool, need_versioning: bool,
                     report_violation: Any) -> None:
    name = short(b.urn)
    pabs = facts.blocks.get(b.urn, [])
    if not pabs:
        if not facts.unsure_blocks:
            report_violation(f"S3 bucket '{name}' has no public access block; add an "
                             f"aws.s3.BucketPublicAccessBlock with all four settings True.", b.urn)
    else:
        off = [f for f in _PAB_FLAGS if not any(get(p.props, f) is UNKNOWN or as_bool(get(p.props, f)) for p in pabs)]
        if off:
            report_violation(f"S3 bucket '{name}' has a public access block with {', '.join(off)} off; "
                             f"set all four to True.", b.urn)
    why = _acl_public(get(b.props, "acl"), get(b.props, "grants"), None)
    inline = _policy_doc(get(b.props, "policy"))
    if why:
        report_violation(f"S3 bucket '{name}' is public ({why}); use acl 'private'.", b.urn)
    if inline is not None:
        if public_statements(inline):
            report_violation(f"S3 bucket '{name}' has an inline policy that lets anyone in; name who needs "
                             f"access instead.", b.urn)
        if tls_only(inline):
            facts.tls.add(b.urn)
    elif get(b.props, "policy") is UNKNOWN:
        facts.tls.add(b.urn)
    if need_tls and b.urn not in facts.tls and not facts.unsure_tls:
        report_violation(f"S3 bucket '{name}' accepts plain-HTTP requests; add an aws.s3.BucketPolicy that "
                         f"denies s3:* to everyone when aws:SecureTransport is false (FSBP S3.5).", b.urn)
    inline_v = get(b.props, "versioning.enabled")
    if need_versioning and b.urn not in facts.versioned and not facts.unsure_versions and inline_v is not UNKNOWN \
            and as_bool(inline_v) is not True:
        report_violation(f"S3 bucket '{name}' is not versioned, so an overwritten or deleted object is lost; "
                         f"add an aws.s3.BucketVersioning with status 'Enabled'.", b.urn)


def _check_cos_bucket(b: Any, facts: _BucketFacts, need_versioning: bool, report_violation: Any) -> None:
    name = short(b.urn)
    why = _acl_public(get(b.props, "acl"), None, get(b.props, "aclBody"))
    if why:
        report_violation(f"COS bucket '{name}' is public ({why}); set acl='private' and drop public grants "
                         f"from acl_body.", b.urn)
    enabled = get(b.props, "versioningEnable")
    if need_versioning and b.urn not in facts.versioned and not facts.unsure_versions and enabled is not UNKNOWN \
            and as_bool(enabled) is not True:
        report_violation(f"COS bucket '{name}' is not versioned, so an overwritten or deleted object is lost; "
                         f"set versioning_enable=True.", b.urn)


checkpoint_bucket_private = StackValidationPolicy(
    name="checkpoint-bucket-private",
    description="Buckets are private (no public ACL, policy or grant; S3 blocks public access and requires TLS) "
                "and keep object versions.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_checkpoint_bucket_private,
    config_schema=PolicyConfigSchema(properties={
        "requireVersioning": {
            "type": "boolean", "default": True,
            "description": "Require versioning as well as private access.",
        },
        "requireTls": {
            "type": "boolean", "default": True,
            "description": "Require an S3 bucket policy that denies requests without TLS (FSBP S3.5).",
        },
    }),
    remediation_steps="S3: BucketPublicAccessBlock (all four True), BucketVersioning(Enabled), a BucketPolicy "
                      "denying aws:SecureTransport=false, no public ACL or policy. COS: acl='private', no public "
                      "grant in acl_body or bucket policy, versioning_enable=True.",
)


# ---- stateful-protected ------------------------------------------------------------------------------

def _stateful_protected(args: Any, report_violation: Any) -> None:
    configured = get(args.get_config(), "types")
    types = configured if isinstance(configured, (list, tuple)) and configured else STATEFUL_TYPES
    if args.resource_type not in types:
        return
    if not getattr(args.opts, "protect", False):
        report_violation(
            f"'{args.name}' ({args.resource_type.rsplit(':', 1)[-1]}) holds data but is not protected, so a "
            f"replacement or `pulumi destroy` deletes it; create it with "
            f"ResourceOptions(protect=True).")


stateful_protected = ResourceValidationPolicy(
    name="stateful-protected",
    description="File systems (every FSx flavour, EFS, CFS), data disks and buckets carry Pulumi's protect option.",
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
