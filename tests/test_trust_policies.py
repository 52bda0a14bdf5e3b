"""Confused-deputy conditions on the AWS service roles' trust policies (components/aws/common.py
`assume_role_policy`), checked on every AWS sample plan, and the Tencent service roles, which CAM gives
no such condition (components/tencentcloud/cam.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pulumi
import pytest

from components.aws.common import assume_role_policy
from components.tencentcloud.cam import service_role_document
from gpu_cluster.engine.aws import ACCOUNT, PARTITION
from gpu_cluster.plan import Plan
from gpu_cluster.render import SAMPLE_STACKS, read_stack_file, stack_path

ROLE = "aws:iam/role:Role"
SCHEDULE_GROUP = "aws:scheduler/scheduleGroup:ScheduleGroup"
AWS_STACKS = [s for s in SAMPLE_STACKS if s.startswith("aws-")]

INSTANCE_ROLE_SERVICES = {"ec2.amazonaws.com"}
"""Service principals whose roles are instance roles, not cross-service confused-deputy cases."""


def expected_source_arn(service: str, region: str, plan: Plan) -> str:
    """The aws:SourceArn each service's documentation prescribes, as this project scopes it (the pages are
    cited where the roles are made). A service role of any other service fails the test: its condition
    must be looked up and added here."""
    if service == "dlm.amazonaws.com":  # EBS user guide, "IAM service roles for Amazon Data Lifecycle Manager"
        return f"arn:{PARTITION}:dlm:{region}:{ACCOUNT}:policy/*"
    if service == "vpc-flow-logs.amazonaws.com":  # VPC user guide, "IAM role for publishing flow logs to ..."
        return f"arn:{PARTITION}:ec2:{region}:{ACCOUNT}:vpc-flow-log/*"
    if service == "budgets.amazonaws.com":  # Cost Management user guide, "Cross-service confused deputy prevention"
        return f"arn:{PARTITION}:budgets::{ACCOUNT}:budget/*"
    if service == "scheduler.amazonaws.com":  # EventBridge Scheduler user guide: the schedule group's ARN
        [group] = plan.of_type(SCHEDULE_GROUP)
        return f"arn:{PARTITION}:scheduler:{region}:{ACCOUNT}:schedule-group/{group.inputs['name']}"
    raise AssertionError(f"no documented confused-deputy condition known for {service}")


def _services(statement: dict) -> list[str]:
    service = (statement.get("Principal") or {}).get("Service") or []
    return [service] if isinstance(service, str) else list(service)


def trust_problems(role_name: str, document: dict[str, Any], region: str, plan: Plan) -> list[str]:
    """What a role's trust policy lacks of its service's confused-deputy conditions ([] when nothing)."""
    problems = []
    for statement in document["Statement"]:
        for service in _services(statement):
            if service in INSTANCE_ROLE_SERVICES:
                continue
            condition = statement.get("Condition") or {}
            account = (condition.get("StringEquals") or {}).get("aws:SourceAccount")
            if account != ACCOUNT:
                problems.append(f"{role_name}: {service} without aws:SourceAccount={ACCOUNT} (got {account!r})")
            arn = (condition.get("ArnLike") or {}).get("aws:SourceArn")
            wanted = expected_source_arn(service, region, plan)
            if arn != wanted:
                problems.append(f"{role_name}: {service} aws:SourceArn {arn!r}, documented {wanted!r}")
    return problems


def _region(stack: str) -> str:
    return read_stack_file(stack_path(stack)).config["aws:region"]


def _service_roles(plan: Plan) -> list:
    """The roles a service other than EC2 assumes."""
    return [r for r in plan.of_type(ROLE) if any(set(_services(s)) - INSTANCE_ROLE_SERVICES
                                                 for s in json.loads(r.inputs["assumeRolePolicy"])["Statement"])]


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_service_role_carries_its_confused_deputy_conditions(sample_plan, stack):
    plan = sample_plan(stack)
    roles = _service_roles(plan)
    assert roles, "every AWS cluster has at least the flow-log and snapshot roles"
    problems = [p for r in roles
                for p in trust_problems(r.name, json.loads(r.inputs["assumeRolePolicy"]), _region(stack), plan)]
    assert problems == []


def _without_slurm():
    """aws-scheduled without Slurm: its run windows are EventBridge schedules, with the scheduler's role."""
    from conftest import render_plan

    return render_plan("aws-scheduled", {"scheduler": "none", "idle_stop": {"gpu_util_below_pct": 5, "for_minutes": 60}})


def test_the_scheduler_role_carries_its_confused_deputy_conditions():
    plan = _without_slurm()
    roles = _service_roles(plan)
    assert [p for r in roles for p in trust_problems(r.name, json.loads(r.inputs["assumeRolePolicy"]),
                                                     _region("aws-scheduled"), plan)] == []


def test_the_sample_plans_hold_every_service_role(sample_plan):
    """The checks above are not vacuous: between them the plans hold a role of each service."""
    plans = [sample_plan(stack) for stack in AWS_STACKS] + [_without_slurm()]
    services = {service for plan in plans for r in _service_roles(plan)
                for s in json.loads(r.inputs["assumeRolePolicy"])["Statement"] for service in _services(s)}
    assert services == {"dlm.amazonaws.com", "vpc-flow-logs.amazonaws.com", "scheduler.amazonaws.com",
                        "budgets.amazonaws.com"}


@pytest.mark.parametrize("drop", [("StringEquals", "aws:SourceAccount"), ("ArnLike", "aws:SourceArn")])
def test_a_dropped_condition_is_reported(sample_plan, drop):
    """The check fails a trust policy that lost either condition, or whose source ARN is widened."""
    plan = sample_plan("aws-scheduled")
    region = _region("aws-scheduled")
    for r in _service_roles(plan):
        document = json.loads(r.inputs["assumeRolePolicy"])
        assert trust_problems(r.name, document, region, plan) == []
        broken = copy.deepcopy(document)
        operator, key = drop
        for statement in broken["Statement"]:
            del statement["Condition"][operator][key]
        assert trust_problems(r.name, broken, region, plan), r.name
        widened = copy.deepcopy(document)
        for statement in widened["Statement"]:
            statement["Condition"]["ArnLike"]["aws:SourceArn"] = "*"
        assert trust_problems(r.name, widened, region, plan), r.name


def test_the_scheduler_role_is_scoped_to_the_clusters_schedule_group():
    plan = _without_slurm()
    [group] = plan.of_type(SCHEDULE_GROUP)
    [role] = [r for r in plan.of_type(ROLE) if r.name.endswith("-scheduler-role")]
    [statement] = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert statement["Condition"] == {
        "StringEquals": {"aws:SourceAccount": ACCOUNT},
        "ArnLike": {"aws:SourceArn": f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule-group/{group.inputs['name']}"}}
    # Every schedule is in that group, so the role still serves each of them.
    schedules = plan.of_type("aws:scheduler/schedule:Schedule")
    assert schedules and {s.inputs["groupName"] for s in schedules} == {group.inputs["name"]}


def test_instance_roles_keep_the_plain_ec2_trust_policy(sample_plan):
    """EC2 instance roles are not cross-service confused-deputy cases (components/aws/compute.py)."""
    plan = sample_plan("aws-large")
    ec2 = [r for r in plan.of_type(ROLE) if "ec2.amazonaws.com" in r.inputs["assumeRolePolicy"]]
    assert len(ec2) == 2  # the GPU nodes' and the Slurm head node's
    for r in ec2:
        assert json.loads(r.inputs["assumeRolePolicy"])["Statement"] == [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]


# ---- the helper ------------------------------------------------------------------------------------

def test_assume_role_policy_with_conditions_is_an_output():
    """Its ARNs are Outputs (account, partition): the document is one too (what it holds: the plan tests)."""
    policy = assume_role_policy("dlm.amazonaws.com", source_account=ACCOUNT,
                                source_arn=pulumi.Output.from_input(f"arn:aws:dlm:us-east-1:{ACCOUNT}:policy/*"))
    assert isinstance(policy, pulumi.Output)


def test_assume_role_policy_without_conditions_is_the_plain_document():
    assert json.loads(assume_role_policy("ec2.amazonaws.com")) == {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}


def test_a_source_arn_needs_its_account():
    with pytest.raises(ValueError, match="aws:SourceAccount"):
        assume_role_policy("dlm.amazonaws.com", source_arn="arn:aws:dlm:us-east-1:123456789012:policy/*")


# ---- Tencent Cloud --------------------------------------------------------------------------------

@pytest.mark.parametrize("service", ["scf.qcloud.com", "cvm.qcloud.com"])
def test_tencent_service_roles_name_only_their_service(service):
    """CAM documents no source-account condition for role trust policies (components/tencentcloud/cam.py)."""
    assert json.loads(service_role_document(service)) == {"version": "2.0", "statement": [{
        "action": "name/sts:AssumeRole", "effect": "allow", "principal": {"service": [service]}}]}
