"""Small helpers every AWS component shares: tags, IAM documents, managed-policy ARNs."""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws


def tagged(tags: Mapping[str, str], name: str, **extra: pulumi.Input[str]) -> dict[str, pulumi.Input[str]]:
    """The cluster's standard tags plus `Name` (and any extra tags), for one taggable resource."""
    return {**tags, "Name": name, **extra}


def assume_role_policy(service: str, source_account: Optional[pulumi.Input[str]] = None,
                       source_arn: Optional[pulumi.Input[str]] = None) -> pulumi.Input[str]:
    """Trust policy letting one AWS service principal (e.g. "ec2.amazonaws.com") assume a role.

    With `source_account` (and `source_arn`) the service may assume it only on behalf of this account
    (and of the resources whose ARN matches `source_arn`, wildcards allowed): the confused-deputy
    conditions `aws:SourceAccount` (StringEquals) and `aws:SourceArn` (ArnLike) that each service's own
    documentation prescribes for its role's trust policy (IAM user guide, "The confused deputy problem",
    cross-service part: docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html). Each caller cites
    its service's page. Without them: the plain JSON document (a str, no Output)."""
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": "sts:AssumeRole",
    }
    if source_account is None and source_arn is None:
        return policy_document([statement])
    if source_account is None:
        raise ValueError("aws:SourceArn without aws:SourceAccount: give the account the ARN names")
    condition: dict[str, Any] = {"StringEquals": {"aws:SourceAccount": source_account}}
    if source_arn is not None:
        condition["ArnLike"] = {"aws:SourceArn": source_arn}
    return policy_output([{**statement, "Condition": condition}])


SESSION_MANAGER_ACTIONS = ("ssm:UpdateInstanceInformation", "ssmmessages:CreateControlChannel",
                           "ssmmessages:CreateDataChannel", "ssmmessages:OpenControlChannel",
                           "ssmmessages:OpenDataChannel")
"""What an instance needs for Session Manager and nothing more: the agent registers itself and opens the
session channels (Systems Manager user guide, "Create a custom IAM role for Session Manager"; the same
five actions as AWS's managed policy AWSCloud9SSMInstanceProfile). Instead of AmazonSSMManagedInstanceCore,
which also lets every process on the node read any SSM parameter of the account (ssm:GetParameter(s) on
*) and take Run Command messages (ec2messages:*): neither is used here. The APIs take no resource-level
permission for these actions (Service Authorization Reference, Systems Manager and Session Manager
message gateway service), so `*` is the only resource."""


def session_manager_policy() -> str:
    return policy_document([{"Sid": "SessionManager", "Effect": "Allow", "Action": list(SESSION_MANAGER_ACTIONS),
                             "Resource": "*"}])


def policy_document(statements: list[dict[str, Any]]) -> str:
    """An IAM policy document as JSON; built with json.dumps so it needs no lookup at deploy time."""
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def policy_output(statements: Any) -> pulumi.Output[str]:
    """A policy document whose statements hold Outputs (ARNs, account ids)."""
    return pulumi.Output.from_input(statements).apply(policy_document)


def aws_managed_policy(partition: pulumi.Input[str], path: str) -> pulumi.Output[str]:
    """ARN of an AWS-managed IAM policy, e.g. path "service-role/AWSDataLifecycleManagerServiceRole"."""
    return pulumi.Output.concat("arn:", partition, ":iam::aws:policy/", path)


def offered_in_zone(instance_type: str, zone: str, offered: Sequence[str], what: Optional[str] = None,
                    remedy: str = "") -> str:
    """`instance_type`, once EC2 says it is offered in the cluster's zone. Zone names are per account
    ("us-east-1a" maps to a different zone in each account: EC2 user guide, "AZ IDs"), so a shape one
    account has in a zone another may not: RunInstances would fail after the network and the file
    system exist."""
    if instance_type not in offered:
        raise pulumi.RunError(f"{what or 'cluster.instance_type=' + instance_type} is not offered in cluster.zone={zone} "
                              f"for this account (DescribeInstanceTypeOfferings; zone names map to different zones "
                              f"in each account); choose a zone where it is{remedy} (the zones: aws ec2 "
                              f"describe-instance-type-offerings --location-type availability-zone --filters "
                              f"Name=instance-type,Values={instance_type})")
    return instance_type


def zone_offered(instance_type: str, zone: str, parent: pulumi.Resource, what: Optional[str] = None,
                 remedy: str = "") -> pulumi.Output[str]:
    """`instance_type` as an Output that resolves only once DescribeInstanceTypeOfferings lists it in
    `zone`: an instance or template that takes it stops `pulumi preview` otherwise."""
    return aws.ec2.get_instance_type_offerings_output(
        location_type="availability-zone",
        filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=[instance_type]),
                 aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="location", values=[zone])],
        opts=pulumi.InvokeOptions(parent=parent)).instance_types.apply(
            lambda found: offered_in_zone(instance_type, zone, found or [], what, remedy))


def instance_arns(partition: pulumi.Input[str], account_id: pulumi.Input[str], region: str,
                  ids: Sequence[pulumi.Input[str]]) -> pulumi.Output[list[str]]:
    """The ARNs of EC2 instances of this account and region, by id."""
    return pulumi.Output.all(partition, account_id, *ids).apply(
        lambda v: [f"arn:{v[0]}:ec2:{region}:{v[1]}:instance/{i}" for i in v[2:]])


def start_stop_statements(arns: pulumi.Input[list[str]], region: str) -> list[dict]:
    """What starting and stopping the cluster's nodes takes: those two calls on those instances only, and the
    KMS grant EC2 makes on the caller's behalf when it starts an instance whose EBS volumes use a customer-managed
    key (EC2 user guide, "How EBS encryption works"; AWS KMS developer guide, "How Amazon EBS uses AWS KMS"),
    for EC2's own use only."""
    return [
        {"Sid": "StartStopTheClusterNodes", "Effect": "Allow",
         "Action": ["ec2:StartInstances", "ec2:StopInstances"], "Resource": arns},
        {"Sid": "StartNodesWithEncryptedVolumes", "Effect": "Allow", "Action": ["kms:CreateGrant"],
         "Resource": "*", "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"},
                                        "StringEquals": {"kms:ViaService": f"ec2.{region}.amazonaws.com"}}},
    ]
