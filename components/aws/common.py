"""Small helpers every AWS component shares: tags, IAM documents, managed-policy ARNs."""

from __future__ import annotations

import json
from typing import Any, Mapping

import pulumi


def tagged(tags: Mapping[str, str], name: str, **extra: pulumi.Input[str]) -> dict[str, pulumi.Input[str]]:
    """The cluster's standard tags plus `Name` (and any extra tags), for one taggable resource."""
    return {**tags, "Name": name, **extra}


def assume_role_policy(service: str) -> str:
    """Trust policy letting one AWS service principal (e.g. "ec2.amazonaws.com") assume a role."""
    return policy_document([{
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": "sts:AssumeRole",
    }])


def policy_document(statements: list[dict[str, Any]]) -> str:
    """An IAM policy document as JSON; built with json.dumps so it needs no lookup at deploy time."""
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def policy_output(statements: Any) -> pulumi.Output[str]:
    """A policy document whose statements hold Outputs (ARNs, account ids)."""
    return pulumi.Output.from_input(statements).apply(policy_document)


def aws_managed_policy(partition: pulumi.Input[str], path: str) -> pulumi.Output[str]:
    """ARN of an AWS-managed IAM policy, e.g. path "service-role/AWSDataLifecycleManagerServiceRole"."""
    return pulumi.Output.concat("arn:", partition, ":iam::aws:policy/", path)
