"""Backup role on AWS (docs/architecture.md): EBS snapshots of the data volumes by a DLM lifecycle
policy that targets them by tag, with its own execution role. FSx automatic backups are a property of
the file system (components/aws/notes.py `fsx_backup_days`, components/aws/storage.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import pulumi
import pulumi_aws as aws

from components.aws.common import assume_role_policy, aws_managed_policy, tagged
from components.snapshot_schedules import snapshot_hours

BACKUP_TAG = "gpu-cluster:backup"
"""Tag key the lifecycle policy targets; the value is the cluster name (set on the data volumes)."""


@dataclass(frozen=True)
class BackupArgs:
    partition: pulumi.Input[str]
    """AWS partition ("aws"), for the managed policy ARN and the trust policy's source ARN."""
    account_id: pulumi.Input[str]
    """This account: DLM may assume the role only on behalf of its lifecycle policies."""
    region: str
    """The provider region, where the lifecycle policy lives (its ARN names it)."""
    target_tags: Mapping[str, str]
    """Tags that select the volumes to snapshot (the data volumes carry them)."""
    every_hours: int
    """Snapshot interval, hours: one of 1, 2, 3, 4, 6, 8, 12, 24 (DLM create_rule.interval)."""
    retain: int
    """Snapshots kept per volume (DLM retain_rule.count, at most 1000)."""
    tags: Mapping[str, str]


class Backup(pulumi.ComponentResource):
    """Scheduled snapshots of the cluster's data volumes."""

    policy_arn: pulumi.Output[str]

    def __init__(self, name: str, args: BackupArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:aws:Backup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        role_name = f"{name}-snapshots-role"
        # Confused deputy: DLM may assume the role only for this account's lifecycle policies. "We
        # recommend that you use the aws:SourceAccount and aws:SourceArn condition keys": aws:SourceAccount
        # the policy's owner, aws:SourceArn arn:partition:dlm:region:account_id:policy/policy_id, the id a
        # wildcard while the policy does not exist yet (it names this role, so it comes after) (Amazon EBS
        # user guide, "IAM service roles for Amazon Data Lifecycle Manager", custom service roles:
        # docs.aws.amazon.com/ebs/latest/userguide/service-role.html).
        trust = assume_role_policy(
            "dlm.amazonaws.com", source_account=args.account_id,
            source_arn=pulumi.Output.concat("arn:", args.partition, ":dlm:", args.region, ":", args.account_id,
                                            ":policy/*"))
        role = aws.iam.Role(
            role_name, assume_role_policy=trust,
            description=f"DLM snapshots of the data volumes of {name}",
            tags=tagged(args.tags, role_name), opts=child)
        # The AWS-managed DLM service-role policy: create/delete/describe snapshots and tag them, nothing
        # else (DLM user guide, "AWS managed policies for Amazon Data Lifecycle Manager").
        attachment = aws.iam.RolePolicyAttachment(
            f"{name}-snapshots-role-dlm", role=role.name,
            policy_arn=aws_managed_policy(args.partition, "service-role/AWSDataLifecycleManagerServiceRole"),
            opts=child)

        policy_name = f"{name}-snapshots"
        policy = aws.dlm.LifecyclePolicy(
            policy_name,
            # letters, digits, spaces, _ and - only (the DLM API; the contract checks it)
            description=f"{name} data volumes every {args.every_hours} h keep {args.retain}",
            execution_role_arn=role.arn,
            state="ENABLED",
            policy_details=aws.dlm.LifecyclePolicyPolicyDetailsArgs(
                resource_types=["VOLUME"],
                target_tags=dict(args.target_tags),
                schedules=[aws.dlm.LifecyclePolicyPolicyDetailsScheduleArgs(
                    name=f"every-{args.every_hours}h-keep-{args.retain}",
                    create_rule=aws.dlm.LifecyclePolicyPolicyDetailsScheduleCreateRuleArgs(
                        # The same hours as Tencent for the same spec (components/snapshot_schedules.py).
                        interval=args.every_hours, interval_unit="HOURS",
                        times=f"{snapshot_hours(args.every_hours)[0]:02d}:00"),
                    retain_rule=aws.dlm.LifecyclePolicyPolicyDetailsScheduleRetainRuleArgs(count=args.retain),
                    copy_tags=True,
                )],
            ),
            tags=tagged(args.tags, policy_name),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attachment]),
        )
        self.policy_arn = policy.arn
        self.register_outputs({"policy_arn": self.policy_arn})
