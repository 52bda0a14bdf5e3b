"""Cost controls on AWS (docs/architecture.md): run windows, idle stop and a hard budget stop.

- Run windows: EventBridge Scheduler schedules, one start and one stop per window, whose universal
  targets call EC2 StartInstances / StopInstances on the cluster's nodes, with a role that may do only
  that (EventBridge Scheduler user guide, "Using universal targets":
  docs.aws.amazon.com/scheduler/latest/UserGuide/managing-targets-universal.html).
- Idle stop: a CloudWatch alarm per node on its GPU utilisation whose action is the EC2 stop action
  `arn:aws:automate:<region>:ec2:stop` — allowed on custom metrics with the InstanceId dimension, which
  the agent configuration adds (CloudWatch user guide, "Create alarms to stop, terminate, reboot, or
  recover an instance"). Missing data never stops a node.
- Hard budget stop: an AWS Budgets action that runs the SSM automation STOP_EC2_INSTANCES on the nodes
  when actual spend crosses `budget.stop_at_pct` (AWS Budgets API, "BudgetsAction", SsmActionDefinition),
  with its own execution role trusting budgets.amazonaws.com.

The spec refuses these controls for spot nodes (one-time spot cannot be stopped) and for reserved
capacity (billed whether it runs or not): components/spec.py `stoppable`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws

from components import run_windows
from components.aws.common import (assume_role_policy, instance_arns, policy_output, start_stop_statements,
                                   tagged)
from components.spec import IdleStop, Schedule

HOLDLESS_PATH = "/gpu-cluster/"
"""The IAM path of a scheduler role that no budget hold can reach. `path` forces a new role (role.go),
so dropping `budget.stop_at_pct` replaces the role: Pulumi deletes the old one (force-detaching a
deny the hold attached) before the deny policy, which IAM would otherwise refuse to delete while it
is attached (DeleteConflict). Roles with a hold keep the default path "/", as they always had."""

IDLE_PERIOD_S = 300
"""The idle-stop alarm judges 5-minute averages (the spec's for_minutes is a multiple of 5)."""


@dataclass(frozen=True)
class CostControlArgs:
    cluster_name: str
    region: str
    account_id: pulumi.Input[str]
    partition: pulumi.Input[str]
    node_ids: Sequence[pulumi.Input[str]]
    """Every instance the controls start and stop (GPU nodes, and the head node where there is one)."""
    gpu_node_ids: Sequence[pulumi.Input[str]]
    """The instances watched for idleness (the GPU nodes)."""
    tags: Mapping[str, str]
    topic_arn: pulumi.Input[str]
    """Where the idle-stop alarms report."""
    schedule: Optional[Schedule] = None
    idle_stop: Optional[IdleStop] = None
    budget_name: Optional[pulumi.Input[str]] = None
    stop_at_pct: Optional[int] = None
    emails: tuple[str, ...] = ()
    """Subscribers of the budget action (AWS Budgets requires at least one)."""
    starter_role: Optional[aws.iam.Role] = None
    """A role that starts the nodes outside the run windows' schedules: the Slurm head node's, whose power programs
    start them for pending jobs. The budget hold denies it ec2:StartInstances too."""


def _instance_arns(args: CostControlArgs) -> pulumi.Output[list[str]]:
    return instance_arns(args.partition, args.account_id, args.region, args.node_ids)


class CostControls(pulumi.ComponentResource):
    """What stops the cluster's nodes, and when."""

    def __init__(self, name: str, args: CostControlArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:aws:CostControls", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.schedule_names: list[pulumi.Output[str]] = []
        self.scheduler_role: Optional[aws.iam.Role] = None
        # The hold's deny policy exists before the scheduler role and goes after it: AWS Budgets attaches
        # it to the role outside the stack, IAM refuses to delete an attached policy (the provider's policy
        # delete does not detach it), and the role is deleted with force_detach_policies, which detaches
        # it. So a destroy after the hold fired still works, and so does an update that drops
        # stop_at_pct: that replaces the role (HOLDLESS_PATH), whose old self goes first.
        self._deny: Optional[aws.iam.Policy] = None
        if (args.schedule is not None or args.starter_role is not None) and args.stop_at_pct is not None:
            self._deny = self._hold_policy(name, args, child)
        if args.schedule is not None:
            self.scheduler_role = self._schedules(name, args, child)
        if args.idle_stop is not None:
            self._idle_stop(name, args, child)
        if args.stop_at_pct is not None:
            self._budget_stop(name, args, child)
        self.register_outputs({"schedule_names": self.schedule_names})

    def _schedules(self, name: str, args: CostControlArgs, child: pulumi.ResourceOptions) -> aws.iam.Role:
        role_name = f"{name}-scheduler-role"
        group_name = f"{name}-schedules"
        # Confused deputy: EventBridge Scheduler may assume the role only for this account's schedules in
        # this cluster's schedule group. aws:SourceAccount and aws:SourceArn in the execution role's trust
        # policy, and "The value of aws:SourceArn must be your EventBridge Scheduler schedule group ARN"
        # (never a schedule's) (EventBridge Scheduler user guide, "Confused deputy prevention in EventBridge
        # Scheduler": docs.aws.amazon.com/scheduler/latest/UserGuide/cross-service-confused-deputy-prevention.html);
        # the group ARN is arn:${Partition}:scheduler:${Region}:${Account}:schedule-group/${GroupName}
        # (Service Authorization Reference, "Actions, resources, and condition keys for Amazon EventBridge
        # Scheduler"). Built from the group's name, which this component sets.
        trust = assume_role_policy(
            "scheduler.amazonaws.com", source_account=args.account_id,
            source_arn=pulumi.Output.concat("arn:", args.partition, ":scheduler:", args.region, ":",
                                            args.account_id, ":schedule-group/", group_name))
        role = aws.iam.Role(role_name, assume_role_policy=trust,
                            description=f"Starts and stops the nodes of {args.cluster_name} in their run windows",
                            force_detach_policies=True, path=None if self._deny else HOLDLESS_PATH,
                            tags=tagged(args.tags, role_name),
                            opts=pulumi.ResourceOptions(parent=self, depends_on=[self._deny] if self._deny else []))
        policy = aws.iam.RolePolicy(
            f"{name}-scheduler-start-stop", role=role.id,
            policy=policy_output(start_stop_statements(_instance_arns(args), args.region)),
            opts=child)
        group = aws.scheduler.ScheduleGroup(group_name, name=group_name, tags=tagged(args.tags, group_name), opts=child)
        instances = pulumi.Output.all(*args.node_ids).apply(lambda ids: json.dumps({"InstanceIds": list(ids)}))
        parsed = [run_windows.parse(w) for w in args.schedule.windows]
        counts = {"start": 0, "stop": 0}
        for event in run_windows.events(parsed):
            action = "startInstances" if event.action == "start" else "stopInstances"
            index = counts[event.action]
            counts[event.action] += 1
            schedule = aws.scheduler.Schedule(
                f"{name}-{event.action}-{index}",
                group_name=group.name,
                description=f"{event.action} the nodes of {args.cluster_name} ({', '.join(args.schedule.windows)}, "
                            f"{args.schedule.timezone})",
                schedule_expression=event.cron(),
                schedule_expression_timezone=args.schedule.timezone,
                flexible_time_window=aws.scheduler.ScheduleFlexibleTimeWindowArgs(mode="OFF"),
                target=aws.scheduler.ScheduleTargetArgs(
                    arn=f"arn:aws:scheduler:::aws-sdk:ec2:{action}", role_arn=role.arn, input=instances),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]))
            self.schedule_names.append(schedule.name)
        return role

    def _idle_stop(self, name: str, args: CostControlArgs, child: pulumi.ResourceOptions) -> None:
        from components.aws.monitoring import GPU_UTILISATION, NAMESPACE

        idle = args.idle_stop
        stop = f"arn:aws:automate:{args.region}:ec2:stop"
        for i, node_id in enumerate(args.gpu_node_ids):
            alarm_name = f"{name}-node-{i}-idle-stop"
            aws.cloudwatch.MetricAlarm(
                alarm_name,
                alarm_description=f"Stops {args.cluster_name} node {i} when its GPUs average below "
                                  f"{idle.gpu_util_below_pct} % for {idle.for_minutes} min (idle_stop)",
                namespace=NAMESPACE, metric_name=GPU_UTILISATION, dimensions={"InstanceId": node_id},
                statistic="Average", period=IDLE_PERIOD_S, evaluation_periods=idle.for_minutes * 60 // IDLE_PERIOD_S,
                threshold=idle.gpu_util_below_pct, comparison_operator="LessThanThreshold",
                # A node that sends nothing is reported by the monitoring alarms, never stopped.
                treat_missing_data="notBreaching",
                alarm_actions=[stop, args.topic_arn], tags=tagged(args.tags, alarm_name), opts=child)

    def _budget_stop(self, name: str, args: CostControlArgs, child: pulumi.ResourceOptions) -> None:
        role_name = f"{name}-budget-stop-role"
        # Confused deputy: AWS Budgets may assume the role only for this account's budgets: aws:SourceAccount,
        # and "For AWS Budgets, the value of aws:SourceArn must be arn:aws:budgets::123456789012:budget/*"
        # (AWS Cost Management user guide, "Cross-service confused deputy prevention", whose example is
        # this sts:AssumeRole trust policy: docs.aws.amazon.com/cost-management/latest/userguide/
        # cross-service-confused-deputy-prevention.html).
        trust = assume_role_policy(
            "budgets.amazonaws.com", source_account=args.account_id,
            source_arn=pulumi.Output.concat("arn:", args.partition, ":budgets::", args.account_id, ":budget/*"))
        role = aws.iam.Role(role_name, assume_role_policy=trust,
                            description=f"Lets AWS Budgets stop the nodes of {args.cluster_name} at "
                                        f"{args.stop_at_pct} % of the budget",
                            tags=tagged(args.tags, role_name), opts=child)
        # The AWS managed policy AWSBudgetsActions_RolePolicyForResourceAdministrationWithSSM, narrowed to
        # stopping: EC2 calls only through SSM, and only the AWS-StopEC2Instance automation (AWS Cost
        # Management user guide, "Setting up a role for AWS Budgets to run budget actions":
        # docs.aws.amazon.com/cost-management/latest/userguide/budgets-action-role.html; the managed
        # policy: docs.aws.amazon.com/aws-managed-policy/latest/reference/
        # AWSBudgetsActions_RolePolicyForResourceAdministrationWithSSM.html).
        ssm = pulumi.Output.concat("arn:", args.partition, ":ssm:", args.region, ":*")
        policy = aws.iam.RolePolicy(
            f"{name}-budget-stop-policy", role=role.id,
            policy=policy_output([
                {"Sid": "StopTheClusterNodesThroughSsm", "Effect": "Allow",
                 "Action": ["ec2:StopInstances"], "Resource": _instance_arns(args),
                 "Condition": {"ForAnyValue:StringEquals": {"aws:CalledVia": ["ssm.amazonaws.com"]}}},
                {"Sid": "SeeInstancesThroughSsm", "Effect": "Allow", "Action": ["ec2:DescribeInstanceStatus"],
                 "Resource": "*",
                 "Condition": {"ForAnyValue:StringEquals": {"aws:CalledVia": ["ssm.amazonaws.com"]}}},
                {"Sid": "RunTheStopAutomation", "Effect": "Allow", "Action": ["ssm:StartAutomationExecution"],
                 "Resource": [
                     pulumi.Output.concat("arn:", args.partition, ":ssm:", args.region, ":*:document/AWS-StopEC2Instance"),
                     pulumi.Output.concat(ssm, ":automation-execution/*"),
                     pulumi.Output.concat(ssm, ":automation-definition/AWS-StopEC2Instance:*")]},
            ]),
            opts=child)
        common = dict(
            budget_name=args.budget_name, approval_model="AUTOMATIC", notification_type="ACTUAL",
            action_threshold=aws.budgets.BudgetActionActionThresholdArgs(
                action_threshold_type="PERCENTAGE", action_threshold_value=float(args.stop_at_pct)),
            execution_role_arn=role.arn,
            subscribers=[aws.budgets.BudgetActionSubscriberArgs(address=e, subscription_type="EMAIL")
                         for e in args.emails] + [
                aws.budgets.BudgetActionSubscriberArgs(address=args.topic_arn, subscription_type="SNS")])
        aws.budgets.BudgetAction(
            f"{name}-budget-stop",
            action_type="RUN_SSM_DOCUMENTS",
            definition=aws.budgets.BudgetActionDefinitionArgs(
                ssm_action_definition=aws.budgets.BudgetActionDefinitionSsmActionDefinitionArgs(
                    action_sub_type="STOP_EC2_INSTANCES", instance_ids=list(args.gpu_node_ids),
                    region=args.region)),
            tags=tagged(args.tags, f"{name}-budget-stop"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]), **common)
        starters = [r for r in (self.scheduler_role, args.starter_role) if r is not None]
        if starters and self._deny is not None:
            self._hold_starts(name, args, role, self._deny, starters, common, child)

    def _hold_policy(self, name: str, args: CostControlArgs, child: pulumi.ResourceOptions) -> aws.iam.Policy:
        """The Deny of ec2:StartInstances on the nodes that the budget hold attaches to the scheduler's role."""
        deny_name = f"{name}-hold-starts"
        return aws.iam.Policy(
            deny_name, description=f"Attached by AWS Budgets at {args.stop_at_pct} %: the run windows of "
                                   f"{args.cluster_name} may not start its nodes",
            policy=policy_output([{"Sid": "NoStartsOverBudget", "Effect": "Deny", "Action": ["ec2:StartInstances"],
                                   "Resource": _instance_arns(args)}]),
            tags=tagged(args.tags, deny_name), opts=child)

    def _hold_starts(self, name: str, args: CostControlArgs, budget_role: aws.iam.Role, deny: aws.iam.Policy,
                     starters: list[aws.iam.Role], common: dict, child: pulumi.ResourceOptions) -> None:
        """Keep the run windows (or Slurm's resume program) from starting the stopped nodes again: at the same
        threshold a second action attaches a Deny of ec2:StartInstances to the roles that start nodes (AWS
        Budgets API, "IamActionDefinition"), which stays until the action is reversed."""
        attach = aws.iam.RolePolicy(
            f"{name}-budget-hold-policy", role=budget_role.id,
            policy=policy_output([{
                "Sid": "AttachTheHoldToTheStartingRolesOnly", "Effect": "Allow",
                "Action": ["iam:AttachRolePolicy", "iam:DetachRolePolicy"],
                "Resource": starters[0].arn if len(starters) == 1 else pulumi.Output.all(*[r.arn for r in starters]),
                "Condition": {"ArnEquals": {"iam:PolicyARN": deny.arn}}}]),
            opts=child)
        aws.budgets.BudgetAction(
            f"{name}-budget-hold-starts",
            action_type="APPLY_IAM_POLICY",
            definition=aws.budgets.BudgetActionDefinitionArgs(
                iam_action_definition=aws.budgets.BudgetActionDefinitionIamActionDefinitionArgs(
                    policy_arn=deny.arn, roles=[r.name for r in starters])),
            tags=tagged(args.tags, f"{name}-budget-hold-starts"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attach]), **common)
