"""Budget role on AWS (docs/architecture.md): a monthly AWS Budgets cost budget scoped to the cluster's cost tag,
ACTUAL notifications at each threshold and a FORECASTED one at 100 %, delivered to an SNS topic (also
used by the monitoring alarms) and to the e-mail subscribers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import pulumi
import pulumi_aws as aws

from components.aws.common import policy_output, tagged
from components.spec import NAME_TAG

"""The tag whose value scopes the budget: every taggable resource of a cluster carries it."""


def cost_filter_value(cluster_name: str) -> str:
    """AWS Budgets' TagKeyValue filter for a user-defined tag: "user:<key>$<value>" (AWS Budgets API,
    "Budget": CostFilters; docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_budgets_Budget.html)."""
    return f"user:{NAME_TAG}${cluster_name}"


@dataclass(frozen=True)
class BudgetArgs:
    cluster_name: str
    """Value of the cost tag the budget filters on."""
    monthly_limit: float
    currency: str
    """Budget unit (AWS cost budgets: USD)."""
    thresholds_pct: tuple[int, ...]
    """One ACTUAL notification per threshold, % of the limit; a FORECASTED 100 % one is always added."""
    emails: tuple[str, ...]
    """Subscribers of every notification and of the alarm topic (at most 10 per notification)."""
    account_id: pulumi.Input[str]
    """This account: the SNS topic policy only accepts publishes on its behalf."""
    tags: Mapping[str, str]


class Budget(pulumi.ComponentResource):
    """The cluster's monthly budget and its alert topic."""

    budget_name: pulumi.Output[str]
    topic_arn: pulumi.Output[str]
    """The alert topic, known only once its access policy exists (publishers depend on both)."""

    def __init__(self, name: str, args: BudgetArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:aws:Budget", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        topic_arn = self._alert_topic(name, args, child)
        budget = self._monthly_budget(name, args, child, topic_arn)
        self.budget_name = budget.name
        self.topic_arn = topic_arn
        self.register_outputs({"budget_name": self.budget_name, "topic_arn": self.topic_arn})

    @staticmethod
    def _alert_topic(name: str, args: BudgetArgs, child: pulumi.ResourceOptions) -> pulumi.Output[str]:
        """The alert topic, its access policy and its e-mail subscriptions; the topic's ARN as publishers
        must name it."""
        topic_name = f"{name}-alerts"
        # No KMS on the topic: AWS Budgets cannot publish to a topic encrypted with the AWS-managed key.
        topic = aws.sns.Topic(topic_name, display_name=f"{name} budget and GPU alerts",
                              tags=tagged(args.tags, topic_name), opts=child)
        access = aws.sns.TopicPolicy(
            f"{name}-alerts-policy", arn=topic.arn,
            policy=policy_output(_topic_statements(topic.arn, args.account_id)),
            opts=child)
        # The topic as its publishers must name it: only once its policy lets Budgets and CloudWatch
        # publish (the ARN carries the policy as a dependency, so nothing that sends to it is created
        # before AWS would let it).
        topic_arn = pulumi.Output.all(topic.arn, access.id).apply(lambda values: values[0])
        for i, email in enumerate(args.emails):
            # Each address must confirm the subscription e-mail before it receives alerts.
            aws.sns.TopicSubscription(f"{name}-alerts-email-{i}", topic=topic.arn, protocol="email",
                                      endpoint=email, opts=child)
        return topic_arn

    @staticmethod
    def _monthly_budget(name: str, args: BudgetArgs, child: pulumi.ResourceOptions,
                        topic_arn: pulumi.Output[str]) -> aws.budgets.Budget:
        # The cost-allocation tag the filter needs is activated once per account, outside every
        # cluster stack (components/aws/notes.py says how): the provider's CostAllocationTag fails until
        # billing has seen the key, and its delete deactivates the key for every cluster of the account
        # (terraform-provider-aws internal/service/ce/cost_allocation_tag.go).
        notify = dict(subscriber_email_addresses=list(args.emails), subscriber_sns_topic_arns=[topic_arn])
        notifications = [
            aws.budgets.BudgetNotificationArgs(
                notification_type="ACTUAL", threshold_type="PERCENTAGE", comparison_operator="GREATER_THAN",
                threshold=float(pct), **notify)
            for pct in args.thresholds_pct
        ] + [
            aws.budgets.BudgetNotificationArgs(
                notification_type="FORECASTED", threshold_type="PERCENTAGE", comparison_operator="GREATER_THAN",
                threshold=100.0, **notify),
        ]
        budget_name = f"{name}-monthly"
        return aws.budgets.Budget(
            budget_name,
            name=budget_name,
            budget_type="COST",
            time_unit="MONTHLY",
            limit_amount=f"{args.monthly_limit:.2f}",
            limit_unit=args.currency,
            cost_filters=[aws.budgets.BudgetCostFilterArgs(name="TagKeyValue",
                                                           values=[cost_filter_value(args.cluster_name)])],
            notifications=notifications,
            tags=tagged(args.tags, budget_name),
            opts=child,
        )


def _topic_statements(topic_arn: pulumi.Output[str], account_id: pulumi.Input[str]) -> list[dict]:
    """The alert topic's access policy: the account manages it; Budgets and CloudWatch alarms publish to it
    on the account's behalf only."""
    return [
        {
            "Sid": "AccountOwnerManages",
            "Effect": "Allow",
            "Principal": {"AWS": account_id},
            "Action": ["SNS:GetTopicAttributes", "SNS:SetTopicAttributes", "SNS:AddPermission",
                       "SNS:RemovePermission", "SNS:DeleteTopic", "SNS:Subscribe",
                       "SNS:ListSubscriptionsByTopic", "SNS:Publish"],
            "Resource": topic_arn,
        },
        {
            "Sid": "BudgetsPublish",
            "Effect": "Allow",
            "Principal": {"Service": "budgets.amazonaws.com"},
            "Action": "SNS:Publish",
            "Resource": topic_arn,
            "Condition": {"StringEquals": {"aws:SourceAccount": account_id}},
        },
        {
            "Sid": "CloudWatchAlarmsPublish",
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": "SNS:Publish",
            "Resource": topic_arn,
            "Condition": {"StringEquals": {"aws:SourceAccount": account_id}},
        },
    ]
