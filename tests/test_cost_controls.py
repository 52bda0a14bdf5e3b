"""Cost controls (run windows, idle stop, budget stop, bought-ahead capacity): the spec refuses what
makes no sense, each cloud renders its mechanism, the Tencent function does what it says, the pricer
counts only scheduled hours and shows each control's effect."""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import zipfile
import zoneinfo
from pathlib import Path

import pytest

from components import catalog, run_windows as windows
from components.aws.compute import block_window, wants_placement_group
from components.spec import ClusterSpec, SpecError, load_spec, stop_problems
from components.tencentcloud import costcontrol as tc_controls
from components.tencentcloud import scf_cost_controls as handler
from conftest import ROOT, gpu_nodes, head_node, merge, rendered, stack_with
from gpu_cluster import pricing
from gpu_cluster.bills.tencentcloud import cost_controls_config
from gpu_cluster.plan import Plan
from gpu_cluster.policyrun import run_policies
from gpu_cluster.pricebook import load_book

AWS = {
    "name": "ft-day", "cloud": "aws", "zone": "us-east-1b", "tier": "entry", "nodes": 1,
    "instance_type": "g5.xlarge", "budget": {"monthly_limit": 400, "emails": ["mlops@example.com"]},
}
TENCENT = {
    "name": "tc-lab", "cloud": "tencentcloud", "zone": "ap-guangzhou-6", "tier": "entry", "nodes": 1,
    "instance_type": "GN7.5XLARGE80",
    "budget": {"monthly_limit": 6000, "currency": "CNY", "emails": ["lab@example.com"]},
}
REGIONS = {"aws": "us-east-1", "tencentcloud": "ap-guangzhou"}
SCHEDULE = {"timezone": "America/New_York", "windows": ["Mon-Fri 08:00-20:00"]}
SOON = (datetime.datetime.now(datetime.timezone.utc).date() + datetime.timedelta(days=14)).isoformat()
P5 = {"tier": "large", "nodes": 2, "instance_type": "p5.48xlarge", "zone": "us-east-1a"}
NO_SLURM = {"scheduler": "none", "idle_stop": {"gpu_util_below_pct": 5, "for_minutes": 60}}
"""aws-scheduled without Slurm: its run windows are EventBridge schedules and its idle stop a CloudWatch alarm."""

SCHEDULE_T = "aws:scheduler/schedule:Schedule"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
ACTION = "aws:budgets/budgetAction:BudgetAction"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
INSTANCE = "aws:ec2/instance:Instance"
BLOCK = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"
ODCR = "aws:ec2/capacityReservation:CapacityReservation"
PG = "aws:ec2/placementGroup:PlacementGroup"
SCF = "tencentcloud:Scf/function:Function"
CAM_ROLE = "tencentcloud:Cam/role:Role"
CAM_POLICY = "tencentcloud:Cam/policy:Policy"
TC_INSTANCE = "tencentcloud:Instance/instance:Instance"
TC_BUDGET = "tencentcloud:Billing/budget:Budget"


def problems(cluster: dict) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(cluster, REGIONS)
    return info.value.problems


def one_problem(cluster: dict, *fragments: str) -> None:
    [p] = problems(cluster)
    for f in fragments:
        assert f in p, p


# ---- windows -------------------------------------------------------------------------------------

def test_windows_parse_into_grouped_edges_and_weekly_hours():
    parsed = [windows.parse("Mon-Fri 09:00-21:00"), windows.parse("Sat 10:00-16:00")]
    assert windows.weekly_hours(parsed) == 66
    events = windows.events(parsed)
    assert [(e.action, e.cron()) for e in events] == [
        ("start", "cron(0 9 ? * MON,TUE,WED,THU,FRI *)"), ("start", "cron(0 10 ? * SAT *)"),
        ("stop", "cron(0 21 ? * MON,TUE,WED,THU,FRI *)"), ("stop", "cron(0 16 ? * SAT *)")]
    assert windows.running_hours_a_week([(e.action, e.cron()) for e in events]) == 66


def test_a_night_shift_split_at_midnight_has_no_edge_at_midnight():
    events = windows.events([windows.parse("Mon 22:00-24:00"), windows.parse("Tue 00:00-06:00")])
    assert [(e.action, e.days, e.minute) for e in events] == [("start", (0,), 22 * 60), ("stop", (1,), 6 * 60)]
    assert windows.running_hours_a_week([(e.action, e.cron()) for e in events]) == 8


def test_a_window_ending_at_midnight_stops_the_next_day_and_sunday_wraps_to_monday():
    [start, stop] = windows.events([windows.parse("Sun 20:00-24:00")])
    assert stop.days == (0,) and stop.minute == 0 and stop.cron() == "cron(0 0 ? * MON *)"
    assert windows.running_hours_a_week([(start.action, start.cron()), (stop.action, stop.cron())]) == 4


# ---- the spec ------------------------------------------------------------------------------------

def test_a_stack_with_every_control_loads():
    spec = load_spec(merge(AWS, {"schedule": SCHEDULE, **NO_SLURM, "budget": {"stop_at_pct": 100}}), REGIONS).spec
    assert spec.schedule.timezone == "America/New_York" and spec.budget.stop_at_pct == 100
    slurm = load_spec(merge(AWS, {"schedule": SCHEDULE, "idle_stop": {"for_minutes": 60},
                                  "budget": {"stop_at_pct": 100}}), REGIONS).spec
    assert slurm.scheduler == "slurm" and slurm.idle_stop.for_minutes == 60 and slurm.idle_stop.gpu_util_below_pct is None


@pytest.mark.parametrize("changes,fragments", [
    ({"schedule": {"timezone": "Mars/Olympus", "windows": ["Mon 09:00-17:00"]}},
     ["cluster.schedule.timezone", "Mars/Olympus", "IANA"]),
    ({"schedule": {"timezone": "UTC", "windows": ["Mon 17:00-09:00"]}}, ["cluster.schedule.windows", "end after"]),
    ({"schedule": {"timezone": "UTC", "windows": ["Mon-Fri 09:00-17:00", "Wed 16:00-18:00"]}},
     ["overlap", "Wed"]),
    ({"schedule": {"timezone": "UTC", "windows": ["weekdays 9-5"]}}, ["'weekdays 9-5'", "Mon-Fri 09:00-21:00"]),
    ({"idle_stop": {"gpu_util_below_pct": 5, "for_minutes": 7}}, ["cluster.idle_stop.for_minutes", "10"]),
    ({"idle_stop": {"gpu_util_below_pct": 5, "for_minutes": 62}}, ["multiple of 5"]),
    ({"budget": {"stop_at_pct": 0}}, ["cluster.budget.stop_at_pct"]),
    ({"capacity": {"type": "prepaid"}}, ["capacity.type='prepaid'", "does not exist on aws", "odcr"]),
    ({"purchase": "spot", "schedule": SCHEDULE}, ["cluster.schedule", "one-time spot", "cannot be stopped"]),
    ({"capacity": {"type": "odcr"}, "idle_stop": {"for_minutes": 60}},
     ["cluster.idle_stop", "billed whether the nodes run or not", "saves nothing"]),
    ({"idle_stop": {"gpu_util_below_pct": 5, "for_minutes": 60}},
     ["cluster.idle_stop.gpu_util_below_pct=5 with scheduler: slurm", "no job", "leave gpu_util_below_pct out"]),
    ({"scheduler": "none", "idle_stop": {"for_minutes": 60}},
     ["cluster.idle_stop.gpu_util_below_pct is missing", "scheduler: none", "1-100"]),
    ({**P5, "capacity": {"type": "capacity_block", "start_date": SOON, "duration_hours": 360}},
     ["duration_hours=360", "24-336 in steps of 24", "4368 in steps of 168"]),
    ({"capacity": {"type": "odcr", "auto_renew": False}}, ["cluster.capacity.auto_renew", "not used by"]),
    ({"schedule": {"timezone": "UTC", "windows": ["Mon-Sun 00:00-24:00"]}}, ["whole week", "leave schedule out"]),
    ({"schedule": {"timezone": "EST5EDT", "windows": ["Mon 09:00-17:00"]}}, ["EST5EDT", "IANA"]),
    ({"schedule": {"timezone": "localtime", "windows": ["Mon 09:00-17:00"]}}, ["localtime", "IANA"]),
    ({"capacity": {"type": "odcr", "months": 3}}, ["cluster.capacity.months", "not used by capacity.type='odcr'"]),
    ({"capacity": {"type": "odcr", "reservation_id": "cr-123"}}, ["reservation_id='cr-123'", "cr-[0-9a-f]{17}"]),
])
def test_controls_that_make_no_sense_are_one_sentence(changes, fragments):
    one_problem(merge(AWS, changes), *fragments)


def test_capacity_blocks_are_sold_in_powers_of_two_up_to_64():
    cluster = merge(AWS, {**P5, "nodes": 3,
                          "capacity": {"type": "capacity_block", "start_date": SOON, "duration_hours": 336}})
    one_problem(cluster, "cluster.nodes=3", "1, 2, 4, 8, 16, 32, 64")
    load_spec(merge(cluster, {"nodes": 2}), REGIONS)
    load_spec(merge(cluster, {"nodes": 2, "capacity": {"duration_hours": 21 * 24}}), REGIONS)


def test_tencent_refuses_stopping_shapes_with_local_disks_and_prepaid_scratch_disks():
    # No tier admits a catalogued Tencent shape with local NVMe today (HCCPNV4h), so the rule is asked directly.
    hcc = catalog.shape("tencentcloud", "HCCPNV4h.48XLARGE1024")
    spec = ClusterSpec.model_validate(merge(TENCENT, {"schedule": SCHEDULE}))
    [problem] = stop_problems(spec, hcc)
    assert "cluster.schedule on HCCPNV4h.48XLARGE1024" in problem and "local disks" in problem
    assert stop_problems(spec, catalog.shape("tencentcloud", "GN7.5XLARGE80")) == []
    one_problem(merge(TENCENT, {"capacity": {"type": "prepaid"}, "storage": {"scratch": "disk"}}),
                "scratch='disk' with capacity.type='prepaid'")
    one_problem(merge(TENCENT, {"capacity": {"type": "prepaid", "months": 13}}), "months=13", "24, 36, 48")


def test_idle_stop_defaults_on_only_for_experimental_on_demand_clusters():
    experimental = load_spec(merge(AWS, {"criticality": "experimental"}), REGIONS)
    # With Slurm (AWS's default), idle means no job: no GPU threshold.
    assert (experimental.spec.idle_stop.gpu_util_below_pct, experimental.spec.idle_stop.for_minutes) == (None, 60)
    assert any("idle_stop: on by default" in n and "no job for 60 min" in n for n in experimental.notes)
    alone = load_spec(merge(AWS, {"criticality": "experimental", "scheduler": "none"}), REGIONS)
    assert (alone.spec.idle_stop.gpu_util_below_pct, alone.spec.idle_stop.for_minutes) == (5, 60)
    assert any("idle_stop: on by default" in n and "GPUs below 5 %" in n for n in alone.notes)
    assert load_spec(merge(AWS, {"criticality": "critical"}), REGIONS).spec.idle_stop is None
    assert load_spec(merge(AWS, {"criticality": "standard"}), REGIONS).spec.idle_stop is None
    assert load_spec(merge(AWS, {"criticality": "experimental", "purchase": "spot"}), REGIONS).spec.idle_stop is None
    assert load_spec(merge(AWS, {"criticality": "experimental", "idle_stop": None}), REGIONS).spec.idle_stop is None


def test_the_plan_says_which_mechanism_stops_an_idle_node():
    """With Slurm, Slurm power saving stops a node with no job and starts it for the next one (a job in a CPU-only
    phase keeps its node); without, a CloudWatch alarm on GPU use stops it."""
    from components.aws.notes import cost_control_notes

    def notes(changes: dict) -> list[str]:
        cluster = load_spec(merge(AWS, {"criticality": "experimental", **changes}), REGIONS)
        return [n for n in cost_control_notes(cluster.spec, cluster.shape) if n.startswith("idle_stop")]

    [slurm] = notes({"scheduler": "slurm"})
    assert slurm.startswith("idle_stop with Slurm: Slurm power saving") and "no job for 60 min" in slurm
    assert "CPU-only phase keeps its node" in slurm and "power agent" in slurm
    [alarm] = notes({"scheduler": "none"})
    assert alarm.startswith("idle_stop: a CloudWatch alarm") and "below 5 %" in alarm
    assert notes({"scheduler": "slurm", "idle_stop": None}) == []


# ---- AWS -------------------------------------------------------------------------------------------

def _policy(plan: Plan, name_part: str) -> dict:
    r = next(r for r in plan.of_type(ROLE_POLICY) if name_part in r.name)
    return json.loads(r.inputs["policy"])


def _trust(plan: Plan, name_part: str) -> set[str]:
    r = next(r for r in plan.of_type(ROLE) if name_part in r.name)
    return {s["Principal"]["Service"] for s in json.loads(r.inputs["assumeRolePolicy"])["Statement"]}


@pytest.fixture
def without_slurm(render_cluster):
    """aws-scheduled without Slurm (NO_SLURM), rendered once per test session."""
    return render_cluster("aws-scheduled", NO_SLURM)


def test_aws_run_windows_are_scheduler_schedules_on_the_nodes(without_slurm):
    plan = without_slurm
    node_ids = sorted(n.id for n in plan.of_type(INSTANCE))  # the GPU node (no head node without Slurm)
    assert len(node_ids) == 1
    schedules = {r.name.rsplit("-cost-controls-", 1)[-1]: r.inputs for r in plan.of_type(SCHEDULE_T)}
    assert set(schedules) == {"start-0", "stop-0"}
    for name, action, hour in (("start-0", "startInstances", 8), ("stop-0", "stopInstances", 20)):
        s = schedules[name]
        assert s["scheduleExpression"] == f"cron(0 {hour} ? * MON,TUE,WED,THU,FRI *)"
        assert s["scheduleExpressionTimezone"] == "America/New_York"
        assert s["flexibleTimeWindow"] == {"mode": "OFF"}
        assert s["target"]["arn"] == f"arn:aws:scheduler:::aws-sdk:ec2:{action}"
        assert sorted(json.loads(s["target"]["input"])["InstanceIds"]) == node_ids
    assert _trust(plan, "scheduler-role") == {"scheduler.amazonaws.com"}
    statement, grant = _policy(plan, "scheduler-start-stop")["Statement"]
    assert sorted(statement["Action"]) == ["ec2:StartInstances", "ec2:StopInstances"]
    assert all(arn.endswith(tuple(node_ids)) and ":instance/" in arn for arn in statement["Resource"])
    assert grant["Action"] == ["kms:CreateGrant"]  # only for EC2's own use, through EC2 in this region
    assert grant["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"},
                                  "StringEquals": {"kms:ViaService": "ec2.us-east-1.amazonaws.com"}}


def test_aws_idle_stop_is_an_alarm_with_the_ec2_stop_action(without_slurm):
    plan = without_slurm
    [alarm] = [r.inputs for r in plan.of_type(ALARM) if r.name.endswith("idle-stop")]
    assert "arn:aws:automate:us-east-1:ec2:stop" in alarm["alarmActions"]
    assert (alarm["threshold"], alarm["comparisonOperator"], alarm["period"], alarm["evaluationPeriods"]) == (
        5, "LessThanThreshold", 300, 12)
    assert alarm["treatMissingData"] == "notBreaching"
    (node,) = gpu_nodes(plan, INSTANCE)  # never the head node
    assert alarm["dimensions"] == {"InstanceId": node.id}


def test_aws_budget_stop_is_a_budgets_action_on_the_nodes(without_slurm):
    plan = without_slurm
    actions = {r.name.rsplit("-", 2)[-2] + "-" + r.name.rsplit("-", 1)[-1]: r.inputs for r in plan.of_type(ACTION)}
    stop, hold = actions["budget-stop"], actions["hold-starts"]
    for action in (stop, hold):
        assert (action["approvalModel"], action["notificationType"]) == ("AUTOMATIC", "ACTUAL")
        assert action["actionThreshold"] == {"actionThresholdType": "PERCENTAGE", "actionThresholdValue": 100}
        assert {"address": "mlops@example.com", "subscriptionType": "EMAIL"} in action["subscribers"]
    assert stop["actionType"] == "RUN_SSM_DOCUMENTS"
    ssm = stop["definition"]["ssmActionDefinition"]
    (node,) = gpu_nodes(plan, INSTANCE)  # the budget stop stops GPU nodes only
    assert ssm["actionSubType"] == "STOP_EC2_INSTANCES" and ssm["instanceIds"] == [node.id]
    assert _trust(plan, "budget-stop-role") == {"budgets.amazonaws.com"}
    statements = _policy(plan, "budget-stop-policy")["Statement"]
    actions_allowed = sorted(a for s in statements for a in s["Action"])
    assert actions_allowed == ["ec2:DescribeInstanceStatus", "ec2:StopInstances", "ssm:StartAutomationExecution"]
    assert all("ssm.amazonaws.com" in json.dumps(s.get("Condition")) for s in statements if s["Action"][0][:4] == "ec2:")
    # The run windows may not start the nodes again: a Deny on the schedules' role, attached by Budgets.
    scheduler_role = next(r for r in plan.of_type(ROLE) if "scheduler-role" in r.name)
    assert hold["actionType"] == "APPLY_IAM_POLICY"
    assert hold["definition"]["iamActionDefinition"]["roles"] == [scheduler_role.outputs["name"]]
    deny = next(r for r in plan.of_type("aws:iam/policy:Policy") if r.name.endswith("hold-starts"))
    assert hold["definition"]["iamActionDefinition"]["policyArn"] == deny.outputs["arn"]
    [statement] = json.loads(deny.inputs["policy"])["Statement"]
    assert (statement["Effect"], statement["Action"]) == ("Deny", ["ec2:StartInstances"])
    [attach] = _policy(plan, "budget-hold-policy")["Statement"]
    assert attach["Resource"] == scheduler_role.outputs["arn"]
    assert attach["Condition"] == {"ArnEquals": {"iam:PolicyARN": deny.outputs["arn"]}}
    # Budgets attaches the deny outside the stack: a destroy deletes the role first, detaching it, and
    # only then the policy (IAM refuses to delete an attached policy).
    assert scheduler_role.inputs["forceDetachPolicies"] is True and deny.urn in scheduler_role.dependencies


def test_dropping_the_budget_stop_replaces_the_scheduler_role_so_a_fired_hold_cannot_block_the_update(without_slurm):
    """After the hold fired, Budgets has attached the deny policy to the schedules' role, and IAM refuses to
    delete an attached policy. Dropping stop_at_pct deletes that policy: the update must also replace the
    role (a new path), so Pulumi deletes the old role first (force-detaching the deny; in the old state it
    depends on the policy) and the policy after it. A stack with the hold keeps the role's default path."""
    from components.aws.costcontrol import HOLDLESS_PATH
    from gpu_cluster.review import diff_plans

    held = without_slurm
    free = Plan.from_doc(rendered(stack_with("aws-scheduled", {**NO_SLURM, "budget": {"stop_at_pct": None}})).plan())
    old_role = next(r for r in held.of_type(ROLE) if "scheduler-role" in r.name)
    new_role = next(r for r in free.of_type(ROLE) if "scheduler-role" in r.name)
    deny = next(r for r in held.of_type("aws:iam/policy:Policy") if r.name.endswith("hold-starts"))
    assert "path" not in old_role.inputs and new_role.inputs["path"] == HOLDLESS_PATH
    assert new_role.outputs["arn"].endswith(f":role{HOLDLESS_PATH}{new_role.outputs['name']}")
    changes = {c.urn: c for c in diff_plans(held, free)}
    assert changes[old_role.urn].action == "replace" and "path" in changes[old_role.urn].keys
    assert changes[deny.urn].action == "delete" and deny.urn in old_role.dependencies
    assert old_role.inputs["forceDetachPolicies"] is True
    assert not free.of_type("aws:iam/policy:Policy") and not free.of_type(ACTION)


def test_with_slurm_slurm_alone_starts_and_stops_the_gpu_nodes(sample_plan):
    """aws-scheduled has Slurm: no schedule or idle alarm acts on a node. The head node's role may find the GPU
    nodes and start and stop them (never the head node); its boot carries the windows' timer and slurm.conf's
    power saving; the GPU nodes say so in their tags; the budget hold denies the head node's role the starts."""
    from components.slurm.power import IDLE_MINUTES_TAG, POWER_TAG, RUN_HOURS_TAG
    from conftest import boot_document, load_yaml

    plan = sample_plan("aws-scheduled")
    assert not plan.of_type(SCHEDULE_T) and not [r for r in plan.of_type(ALARM) if r.name.endswith("idle-stop")]
    assert not [r for r in plan.of_type(ROLE) if "scheduler-role" in r.name]
    (node,) = gpu_nodes(plan, INSTANCE)
    head = head_node(plan, INSTANCE)
    find, start_stop, grant = _policy(plan, "-head-role-power")["Statement"]
    assert (find["Action"], find["Resource"]) == (["ec2:DescribeInstances"], "*")
    assert sorted(start_stop["Action"]) == ["ec2:StartInstances", "ec2:StopInstances"]
    assert [arn.rsplit("/", 1)[-1] for arn in start_stop["Resource"]] == [node.id] and head.id not in json.dumps(start_stop)
    assert grant["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}
    tags = node.inputs["tags"]
    assert (tags[POWER_TAG], tags[RUN_HOURS_TAG], tags[IDLE_MINUTES_TAG]) == ("slurm", "60", "60")
    assert POWER_TAG not in head.inputs["tags"]
    written = {f["path"]: f["content"] for f in load_yaml(boot_document(head))["write_files"]}
    conf = written["/etc/slurm/slurm.conf"]
    assert "ResumeProgram=/opt/gpu-cluster/bin/slurm-resume\n" in conf and "SuspendTime=3600\n" in conf
    assert conf.rstrip().endswith("State=UP SuspendTime=3600")
    window = written["/opt/gpu-cluster/bin/slurm-window"]
    assert "TIMEZONE='America/New_York'" in window and "WINDOWS='0,1,2,3,4 480 1200'" in window
    runcmd = json.dumps(load_yaml(boot_document(head))["runcmd"])
    assert "gpu-cluster-slurm-window.timer" in runcmd and "gpu-cluster-power-agent.service" in runcmd
    # The power programs only queue; the root agent calls EC2: the metadata service stays root's alone.
    assert "aws ec2" not in written["/opt/gpu-cluster/bin/slurm-resume"]
    assert "aws ec2 start-instances" in written["/opt/gpu-cluster/bin/power-agent"]
    assert "--uid-owner 0 -j RETURN" in written["/opt/gpu-cluster/bin/metadata-guard"]
    assert "64030" not in written["/opt/gpu-cluster/bin/metadata-guard"]
    hold = next(r for r in plan.of_type(ACTION) if r.name.endswith("hold-starts"))
    head_role = next(r for r in plan.of_type(ROLE) if r.name.endswith("-head-role"))
    assert hold.inputs["definition"]["iamActionDefinition"]["roles"] == [head_role.outputs["name"]]
    [attach] = _policy(plan, "budget-hold-policy")["Statement"]
    assert attach["Resource"] == head_role.outputs["arn"]


def test_a_stack_without_controls_has_no_control_resources(sample_plan):
    plan = sample_plan("aws-large")
    assert not plan.of_type(SCHEDULE_T) and not plan.of_type(ACTION)
    assert not [r for r in plan.of_type(ALARM) if r.name.endswith("idle-stop")]


BUY = {"capacity": {"reservation_id": None, "start_date": SOON, "duration_hours": 336}}


def test_step_one_buys_the_block_and_launches_no_node(render_cluster):
    plan = render_cluster("aws-reserved", BUY)
    block = plan.one(BLOCK)
    assert block.inputs["instancePlatform"] == "Linux/UNIX"
    assert {k: block.inputs["tags"][k] for k in ("gpu-cluster:block-hours", "gpu-cluster:block-shape",
                                                   "gpu-cluster:block-count")} == {
        "gpu-cluster:block-hours": "336", "gpu-cluster:block-shape": "p5.48xlarge", "gpu-cluster:block-count": "2"}
    assert not gpu_nodes(plan, INSTANCE)  # EC2 launches into a block only once it is active
    assert run_policies(plan) == []
    cost = pricing.price_plan(plan, load_book(cache=None))
    lines = [i for i in cost.items if "capacity_block" in i.item]
    assert [(i.quantity, i.unit_price) for i in lines] == [(336, 39.33), (336, 39.33)] and all(i.estimate for i in lines)
    [control] = [c for c in cost.controls if c["control"] == "capacity capacity_block"]
    p5 = catalog.shape("aws", "p5.48xlarge").price_hourly
    assert control["monthly_without"] - control["monthly_with"] == pytest.approx(2 * 336 * (p5 - 39.33), abs=0.1)
    assert block_window(datetime.date(2027, 1, 11), 336) == ("2027-01-11T00:00:00Z", "2027-01-26T00:00:00Z")


def test_a_block_bought_by_this_update_is_priced_whole_in_its_month(render_cluster):
    """Six weeks (1,008 h) of block: AWS charges all of it at purchase, not 730 h a month."""
    plan = render_cluster("aws-reserved", {"capacity": {**BUY["capacity"], "duration_hours": 1008}})
    cost = pricing.price_plan(plan, load_book(cache=None))
    lines = [i for i in cost.items if "capacity_block" in i.item]
    assert [i.quantity for i in lines] == [1008, 1008]
    assert sum(i.monthly for i in lines) == pytest.approx(2 * 1008 * 39.33, abs=0.1)


def test_step_two_launches_the_nodes_into_the_block(sample_plan):
    plan = sample_plan("aws-reserved")
    assert not plan.of_type(BLOCK) and not plan.of_type(PG)  # AWS packs a block's instances itself
    nodes = gpu_nodes(plan, INSTANCE)
    assert len(nodes) == 2
    for node in nodes:
        assert node.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
        target = node.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
        assert target["capacityReservationId"] == "cr-0a1b2c3d4e5f60718"
    assert run_policies(plan) == []
    assert not wants_placement_group(2, "large", "capacity_block")


BLOCK_LOOKUP = "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation"


def _with_block(monkeypatch, **answer) -> tuple[Plan, list]:
    """aws-reserved rendered while AWS answers the block lookup with `answer` (not the session cache:
    the mock differs)."""
    from gpu_cluster import engine as mocks
    from gpu_cluster.render import render

    normal = mocks.LOOKUPS[BLOCK_LOOKUP]
    monkeypatch.setitem(mocks.LOOKUPS, BLOCK_LOOKUP, lambda args: {**normal(args), **answer})
    result = render(stack_with("aws-reserved"))
    return Plan.from_doc(result.plan()), [a for t, a in result.invokes if t == BLOCK_LOOKUP]


@pytest.mark.parametrize("state", ["scheduled", "payment-pending"])
def test_a_bought_block_launches_nothing_until_aws_says_it_is_active(monkeypatch, state):
    """The start is a time of day and may come after start_date: the nodes wait for the state itself."""
    plan, calls = _with_block(monkeypatch, state=state)
    assert not gpu_nodes(plan, INSTANCE) and not plan.of_type(BLOCK)
    assert calls == [{"id": "cr-0a1b2c3d4e5f60718", "filters": [
        {"name": "instance-type", "values": ["p5.48xlarge"]}, {"name": "availability-zone", "values": ["us-east-1a"]}]}]
    # Active, the nodes launch (the sample plan: test_step_two_launches_the_nodes_into_the_block).


@pytest.mark.parametrize("state", ["expired", "payment-failed"])
def test_a_block_that_is_over_fails_the_render_and_says_what_to_do(monkeypatch, state):
    with pytest.raises(Exception, match=f"the Capacity Block is {state}, its instances are gone; allowed: a new "
                                        f"block .* or capacity.type: none, then `pulumi up --refresh`"):
        _with_block(monkeypatch, state=state)


def test_an_on_demand_reservation_is_not_taken_for_a_block(monkeypatch):
    with pytest.raises(Exception, match="is a default capacity reservation, not a Capacity Block"):
        _with_block(monkeypatch, reservationType="default")


def test_a_block_smaller_than_the_cluster_fails_the_render_in_one_sentence(monkeypatch):
    with pytest.raises(Exception, match=r"cluster.nodes=2: the Capacity Block cr-0a1b2c3d4e5f60718 holds 1 "
                                         r"instance\(s\); allowed: up to 1"):
        _with_block(monkeypatch, instanceCount=1)


def test_capacity_blocks_are_refused_where_aws_does_not_sell_them():
    large = merge(AWS, {"zone": "us-east-1a", "tier": "large", "nodes": 2, "instance_type": "p5.48xlarge"})
    block = {"type": "capacity_block", "start_date": SOON, "duration_hours": 48}
    load_spec(merge(large, {"capacity": block}), REGIONS)
    one_problem(merge(AWS, {"capacity": block}), "instance_type='g5.xlarge'", "p5.48xlarge")
    one_problem(merge(large, {"instance_type": "p5en.48xlarge", "capacity": block}),
                "aws:region='us-east-1'", "p5en.48xlarge blocks are sold in us-east-2")
    # p5e is sold only in blocks: on demand it is refused, naming the one purchase there is.
    one_problem(merge(large, {"instance_type": "p5e.48xlarge"}), "instance_type='p5e.48xlarge'",
                "capacity.type: capacity_block")
    for when in ("2020-01-01", (datetime.date.today() + datetime.timedelta(weeks=10)).isoformat()):
        one_problem(merge(large, {"capacity": {**block, "start_date": when}}), f"start_date={when}", "8 weeks")


def test_placement_required_credits_a_block_only_with_its_reservation():
    doc = rendered(stack_with("aws-reserved")).plan()
    for r in doc["deployment"]["resources"]:
        if r["type"] == INSTANCE:
            for side in ("inputs", "outputs"):
                r[side].pop("capacityReservationSpecification", None)
    found = {(v.policy, v.urn.rsplit("::", 1)[-1]) for v in run_policies(Plan.from_doc(doc))}
    assert found == {("placement-required", "llm-block-compute-node-0"), ("placement-required", "llm-block-compute-node-1")}


def test_an_odcr_is_targeted_in_the_placement_group(render_cluster):
    plan = render_cluster("aws-large", {"capacity": {"type": "odcr"}})
    odcr, group = plan.one(ODCR).inputs, plan.one(PG)
    assert (odcr["instanceType"], odcr["instanceCount"], odcr["instanceMatchCriteria"]) == ("p5.48xlarge", 2, "targeted")
    assert odcr["availabilityZone"] == "us-east-1a" and odcr["placementGroupArn"] == group.outputs["arn"]
    for node in gpu_nodes(plan, INSTANCE):
        target = node.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
        assert target["capacityReservationId"] == plan.one(ODCR).id
        assert "instanceMarketOptions" not in node.inputs
    assert run_policies(plan) == []


# ---- Tencent Cloud -------------------------------------------------------------------------------

TC_NO_SLURM = {"scheduler": "none", "idle_stop": {"gpu_util_below_pct": 5}}
"""tencent-scheduled without Slurm: the run windows and idle stop are the cost-controls function's (with Slurm, the
sample's default, they are Slurm power saving's: tests/test_slurm.py)."""


def _function_plan() -> Plan:
    return Plan.from_doc(rendered(stack_with("tencent-scheduled", TC_NO_SLURM)).plan())


def test_tencent_controls_are_one_function_with_timer_triggers():
    plan = _function_plan()
    fn = plan.one(SCF).inputs
    assert (fn["runtime"], fn["handler"]) == ("Python3.9", "index.main")
    assert fn["enablePublicNet"] is True  # no VPC: the API endpoints are on the public network
    triggers = {t["name"]: t for t in fn["triggers"]}
    assert triggers["windows"] == {"name": "windows", "type": "timer", "triggerDesc": "0 0 * * * * *"}
    assert triggers["idle"]["triggerDesc"] == "0 */5 * * * * *"
    # The render writes no package; its configuration is the component's output `config`, and the package
    # built from it is the one zip_file names (content-addressed, in the user's cache folder).
    [component] = [r for r in plan.resources if r.type == "gpu-cluster:tencentcloud:CostControls"]
    data = tc_controls.code_package("Asia/Shanghai", component.outputs["config"])
    digest = hashlib.sha256(data).hexdigest()[:16]
    assert fn["zipFile"] == f"~/.cache/gpu-cluster/tencent-cost-controls/cost-controls-{digest}.zip"
    package = zipfile.ZipFile(io.BytesIO(data))
    assert sorted(package.namelist()) == ["config.json", "index.py", "zone.tzif"]
    assert "environment" not in fn  # SCF documents variable values as letters, digits and "_", 64 bytes at most
    config = json.loads(package.read("config.json"))
    assert config == cost_controls_config(plan.one(SCF), plan)
    (node,) = gpu_nodes(plan, TC_INSTANCE)
    # No Slurm here (Slurm on Tencent Cloud takes no run windows or idle stop): the GPU node alone.
    assert config["nodes"] == [node.id] and config["gpu_nodes"] == [node.id]
    assert config["timezone"] == "Asia/Shanghai" and config["idle"] == {"below_pct": 5, "for_minutes": 60}
    assert ["start", [0, 1, 2, 3, 4], 540] in config["events"] and ["stop", [5], 960] in config["events"]
    assert package.read("index.py") == Path(handler.__file__).read_bytes()
    zone = zoneinfo.ZoneInfo.from_file(io.BytesIO(package.read("zone.tzif")))
    assert datetime.datetime(2027, 1, 1, tzinfo=zone).utcoffset() == datetime.timedelta(hours=8)
    # CreateFunction takes letters, digits, spaces, commas, newlines and periods in a description.
    assert fn["description"] == "gpu cluster tc lab, run windows and idle stop"
    from gpu_cluster import contracts

    [problem] = contracts.check_resource(SCF, "f", {**fn, "description": "gpu-cluster tc-lab: run windows"})
    assert "argument description='gpu-cluster tc-lab: run windows' does not match the documented form" in problem
    assert not contracts.check_resource(SCF, "f", {**fn, "description": "训练集群, 按时启停."})


def test_tencent_function_role_may_only_touch_the_cluster_nodes():
    plan = _function_plan()
    [role] = [r for r in plan.of_type(CAM_ROLE) if r.name.endswith("-cost-controls-role")]
    trust = json.loads(role.inputs["document"])
    assert trust["statement"][0]["principal"] == {"service": ["scf.qcloud.com"]}
    [policy] = [json.loads(r.inputs["document"]) for r in plan.of_type(CAM_POLICY) if r.name.endswith("-cost-controls-policy")]
    [mutate] = [s for s in policy["statement"] if "name/cvm:StopInstances" in s["action"]]
    nodes = [n.id for n in gpu_nodes(plan, TC_INSTANCE)]
    assert all(r.startswith("qcs::cvm:ap-guangzhou:uin/") for r in mutate["resource"])
    assert sorted(r.rsplit(":instance/", 1)[-1] for r in mutate["resource"]) == sorted(nodes)
    assert plan.one(SCF).inputs["role"] == role.inputs["name"]


def test_tencent_budget_stop_is_a_reminder_at_that_share(sample_plan):
    plan = sample_plan("tencent-scheduled")
    warns = {(w["warnType"], w["thresholdValue"]) for w in plan.one(TC_BUDGET).inputs["warnJsons"]}
    assert ("ACTUAL", "100") in warns


def test_tencent_prepaid_nodes_carry_the_term_and_renewal(sample_plan):
    for node in gpu_nodes(sample_plan("tencent-prepaid"), TC_INSTANCE):  # the head node is pay-as-you-go
        assert node.inputs["instanceChargeType"] == "PREPAID"
        assert node.inputs["instanceChargeTypePrepaidPeriod"] == 3
        assert node.inputs["instanceChargeTypePrepaidRenewFlag"] == "NOTIFY_AND_AUTO_RENEW"
    assert not sample_plan("tencent-prepaid").of_type(SCF)
    # The flag renews month by month after the first term (provider doc instance v1.82.42): the plan says so.
    stack = stack_with("tencent-prepaid")
    cluster = load_spec(stack.config["gpu-cluster:cluster"], {"tencentcloud": stack.config["tencentcloud:region"]})
    [note] = [n for n in cluster.notes if "capacity.type=prepaid" in n]
    assert "a first term of 3 month(s), then renewed automatically one month at a time" in note


def test_edge_minutes_follow_the_zone_offset():
    events = windows.events([windows.parse("Mon-Fri 09:00-17:30")])
    assert tc_controls.edge_minutes(events, "Asia/Shanghai") == [0, 30]
    assert tc_controls.edge_minutes(events, "Asia/Kolkata") == [0, 30]  # +05:30: 09:00 is :30 UTC
    assert tc_controls.windows_cron(windows.events([windows.parse("Mon 09:15-10:00")]), "Asia/Kathmandu") == (
        "0 15,30 * * * * *")  # +05:45


def test_the_code_package_is_reproducible(tmp_path):
    a, b = tc_controls.code_package("Asia/Shanghai", "{}"), tc_controls.code_package("Asia/Shanghai", "{}")
    assert a == b
    path = tc_controls.write_package(a, tmp_path)
    assert Path(path).read_bytes() == a and path.startswith(f"{tmp_path}/gpu-cluster/tencent-cost-controls/cost-controls-")
    assert tc_controls.code_package("Europe/Paris", "{}") != a
    assert tc_controls.code_package("Asia/Shanghai", '{"nodes": ["ins-a"]}') != a  # a new node is new code


def test_the_function_reads_its_configuration_from_its_package(tmp_path, monkeypatch):
    """main() as SCF runs it: index.py unpacked next to config.json and the zone file."""
    import zipfile as zf

    data = tc_controls.code_package("Asia/Shanghai", json.dumps({**CONFIG, "events": []}))
    zf.ZipFile(io.BytesIO(data)).extractall(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    index = importlib.import_module("index")
    calls = []
    monkeypatch.setattr(index, "api", lambda region: lambda service, action, params: calls.append(
        (region, action)) or {"InstanceStatusSet": []})
    assert index.main({"TriggerName": "windows"}) == {"windows": "no window edge now"}
    assert calls == []


# ---- the Tencent function itself -------------------------------------------------------------------

def test_signature_matches_the_documented_example():
    # Tencent Cloud API 3.0 "Signature v3" worked example (GET DescribeInstances Limit=10&Offset=0).
    auth = handler.sign("AKIDz8krbsJ5yKBZQpn74WFkmLPx3EXAMPLE", "Gu5t9xGARNpq86cd98joQYCN3EXAMPLE", "cvm",
                        "cvm.tencentcloudapi.com", 1539084154, "", method="GET", query="Limit=10&Offset=0",
                        content_type="application/x-www-form-urlencoded")
    assert auth == ("TC3-HMAC-SHA256 Credential=AKIDz8krbsJ5yKBZQpn74WFkmLPx3EXAMPLE/2018-10-09/cvm/tc3_request, "
                    "SignedHeaders=content-type;host, "
                    "Signature=5da7a33f6993f0614b047e5df4582db9e9bf4672ba50567dba16c6ccf174c474")


class FakeCloud:
    def __init__(self, states: dict, points: list = ()):
        self.states, self.points, self.calls = dict(states), list(points), []

    def __call__(self, service, action, params):
        self.calls.append((action, params))
        if action == "DescribeInstancesStatus":
            return {"InstanceStatusSet": [{"InstanceId": i, "InstanceState": self.states[i]}
                                          for i in params["InstanceIds"]]}
        if action == "GetMonitorData":
            return {"DataPoints": self.points}
        return {}


CONFIG = {"region": "ap-guangzhou", "nodes": ["ins-a", "ins-b"], "gpu_nodes": ["ins-a", "ins-b"],
          "timezone": "Asia/Shanghai", "events": [["start", [0, 1, 2, 3, 4], 540], ["stop", [0, 1, 2, 3, 4], 1260]],
          "idle": {"below_pct": 5, "for_minutes": 60}}
SHANGHAI = zoneinfo.ZoneInfo("Asia/Shanghai")


def at(*args) -> float:
    return datetime.datetime(*args, tzinfo=SHANGHAI).timestamp()


def test_windows_start_stopped_nodes_at_the_edge_in_the_schedule_zone():
    cloud = FakeCloud({"ins-a": "STOPPED", "ins-b": "RUNNING"})
    assert handler.run(CONFIG, "windows", cloud, at(2027, 3, 1, 9, 0, 40), SHANGHAI) == {
        "windows": "start", "instances": ["ins-a"]}  # Monday 09:00 Shanghai
    assert ("StartInstances", {"InstanceIds": ["ins-a"]}) in cloud.calls


def test_windows_stop_with_stop_charging_and_do_nothing_between_edges():
    cloud = FakeCloud({"ins-a": "RUNNING", "ins-b": "STOPPED"})
    handler.run(CONFIG, "windows", cloud, at(2027, 3, 5, 20, 59, 30), SHANGHAI)  # Friday, 30 s before 21:00
    # Forced when the soft stop fails: the API's default (SOFT) only asks, and an idle node must stop.
    assert ("StopInstances", {"InstanceIds": ["ins-a"], "StoppedMode": "STOP_CHARGING", "StopType": "SOFT_FIRST"}) \
        in cloud.calls
    quiet = FakeCloud({"ins-a": "RUNNING", "ins-b": "RUNNING"})
    assert handler.run(CONFIG, "windows", quiet, at(2027, 3, 6, 9, 0), SHANGHAI) == {"windows": "no window edge now"}
    assert quiet.calls == []  # Saturday: no window


def test_edges_follow_daylight_saving_in_the_schedule_zone():
    paris = zoneinfo.ZoneInfo("Europe/Paris")
    events = [["start", [0], 9 * 60]]
    winter = datetime.datetime(2027, 1, 4, 8, 0, tzinfo=datetime.timezone.utc).timestamp()  # 09:00 CET
    summer = datetime.datetime(2027, 7, 5, 7, 0, tzinfo=datetime.timezone.utc).timestamp()  # 09:00 CEST
    assert handler.edge_now(events, paris, winter) == "start" == handler.edge_now(events, paris, summer)
    assert handler.edge_now(events, paris, winter - 3600) is None


def test_a_late_or_retried_invocation_still_acts_on_the_edge_it_missed():
    """SCF retries a failed asynchronous invocation in the background: 10 minutes after a start edge the
    function still starts the stopped nodes; half an hour after it, it leaves them alone."""
    cloud = FakeCloud({"ins-a": "STOPPED", "ins-b": "RUNNING"})
    assert handler.run(CONFIG, "windows", cloud, at(2027, 3, 1, 9, 10), SHANGHAI) == {
        "windows": "start", "instances": ["ins-a"]}  # Monday, 10 minutes after 09:00
    late = FakeCloud({"ins-a": "STOPPED", "ins-b": "RUNNING"})
    assert handler.run(CONFIG, "windows", late, at(2027, 3, 1, 9, 30), SHANGHAI) == {"windows": "no window edge now"}
    events = [["start", [0], 9 * 60], ["stop", [0], 9 * 60 + 5]]  # the latest edge wins
    assert handler.edge_now(events, SHANGHAI, at(2027, 3, 1, 9, 8)) == "stop"
    # Edges at :00 and :15 make the trigger run every quarter hour: the 09:15 run must not start again a
    # node that idle stop stopped at 09:10, so the late time stays below 15 minutes.
    quarter = windows.events([windows.parse("Mon 09:00-17:15")])
    late = tc_controls.late_seconds(quarter, "Asia/Shanghai")
    assert late == 14 * 60 and tc_controls.late_seconds(windows.events([windows.parse("Mon 09:00-17:00")]),
                                                        "Asia/Shanghai") == handler.EDGE_LATE_S
    start = [[e.action, list(e.days), e.minute] for e in quarter]
    assert handler.edge_now(start, SHANGHAI, at(2027, 3, 1, 9, 15), late) is None
    assert handler.edge_now(start, SHANGHAI, at(2027, 3, 1, 9, 10), late) == "start"


def test_idle_stop_stops_only_running_nodes_idle_in_every_period():
    now = at(2027, 3, 1, 15, 0)
    times = [int(now) - 300 * k for k in range(12, 0, -1)]
    points = [{"Dimensions": [{"Name": "InstanceId", "Value": "ins-a"}], "Timestamps": times, "Values": [1.0] * 12},
              {"Dimensions": [{"Name": "InstanceId", "Value": "ins-b"}], "Timestamps": times,
               "Values": [1.0] * 11 + [40.0]}]
    cloud = FakeCloud({"ins-a": "RUNNING", "ins-b": "RUNNING"}, points)
    assert handler.run(CONFIG, "idle", cloud, now, None) == {"idle_stopped": ["ins-a"]}
    [request] = [p for a, p in cloud.calls if a == "GetMonitorData"]
    assert (request["Namespace"], request["MetricName"], request["Period"]) == ("QCE/CVM", "GpuUtil", 300)


def test_idle_stop_asks_cloud_monitor_ten_nodes_at_a_time():
    nodes = [f"ins-{i:02d}" for i in range(23)]
    cloud = FakeCloud({n: "RUNNING" for n in nodes})
    handler.run({**CONFIG, "nodes": nodes, "gpu_nodes": nodes}, "idle", cloud, at(2027, 3, 1, 15, 0), None)
    asked = [[i["Dimensions"][0]["Value"] for i in p["Instances"]] for a, p in cloud.calls if a == "GetMonitorData"]
    assert [len(batch) for batch in asked] == [10, 10, 3] and sum(asked, []) == nodes


def test_missing_data_is_never_idle():
    now = 1_800_000_000
    gappy = [{"Dimensions": [{"Name": "InstanceId", "Value": "ins-a"}],
              "Timestamps": [now - 300 * k for k in range(6, 0, -1)], "Values": [0.0] * 6}]
    assert handler.idle_nodes(gappy, 5, 60, now) == []
    assert handler.idle_nodes(gappy, 5, 30, now) == ["ins-a"]


# ---- prices ----------------------------------------------------------------------------------------

def test_the_estimate_counts_only_scheduled_hours(sample_plan, without_slurm):
    """With Slurm, the GPU node for the hours a week its tag declares (Slurm powers it within the windows) and the
    head node all month; without, the GPU node for its schedules' hours."""
    cost = pricing.price_plan(sample_plan("aws-scheduled"), load_book(cache=None))
    [node] = [i for i in cost.items if i.item.startswith("GPU nodes")]
    [head] = [i for i in cost.items if i.item.startswith("head node")]
    assert node.quantity == pytest.approx(60 * 730 / 168, abs=0.01) and head.quantity == 730
    controls = {c["control"]: c for c in cost.controls}
    schedule = controls["schedule"]
    assert schedule["monthly_with"] == cost.total
    assert schedule["monthly_without"] == pytest.approx(cost.total + node.unit_price * (730 - node.quantity), abs=0.05)
    assert controls["idle_stop"]["monthly_with"] is None  # Slurm's idle stop: said, not estimated
    assert controls["budget.stop_at_pct"]["monthly_with"] == cost.total  # under the 400 USD stop: no cut
    alone = pricing.price_plan(without_slurm, load_book(cache=None))
    [node] = [i for i in alone.items if i.item.startswith("GPU nodes")]
    assert node.quantity == pytest.approx(60 * 730 / 168, abs=0.01)
    assert not [i for i in alone.items if i.item.startswith("head node")]
    assert {c["control"] for c in alone.controls} >= {"schedule", "idle_stop", "budget.stop_at_pct"}


def test_a_budget_stop_below_the_estimate_caps_the_node_spend(render_cluster):
    plan = render_cluster("aws-scheduled", {"budget": {"monthly_limit": 100, "stop_at_pct": 50,
                                                       "thresholds_pct": [50]}})
    cost = pricing.price_plan(plan, load_book(cache=None))
    [node] = [i for i in cost.items if i.item.startswith("GPU nodes")]
    [stop] = [c for c in cost.controls if c["control"] == "budget.stop_at_pct"]
    assert stop["monthly_without"] == cost.total
    assert stop["monthly_with"] == pytest.approx(50 + (cost.total - node.monthly), abs=0.01)  # nodes stop at 50 USD


def test_tencent_scheduled_hours_come_from_the_function_or_from_slurm(sample_plan):
    for plan in (_function_plan(), sample_plan("tencent-scheduled")):  # the function's, then Slurm's (node tags)
        cost = pricing.price_plan(plan, load_book(cache=None))
        [node] = [i for i in cost.items if i.item.startswith("GPU nodes")]
        assert node.quantity == pytest.approx(66 * 730 / 168, abs=0.01)
        assert [c["control"] for c in cost.controls] == ["schedule", "idle_stop"]
    assert not sample_plan("tencent-scheduled").of_type(SCF)
    # A plan from elsewhere, which holds no configuration of the function: priced as if running all month.
    doc = rendered(stack_with("tencent-scheduled", TC_NO_SLURM)).plan()
    for r in doc["deployment"]["resources"]:
        if r["type"] == "gpu-cluster:tencentcloud:CostControls":
            r["outputs"].pop("config")
    [node] = [i for i in pricing.price_plan(Plan.from_doc(doc), load_book(cache=None)).items
              if i.item.startswith("GPU nodes")]
    assert node.quantity == 730


def test_prepaid_terms_are_priced_from_the_price_sources_or_listed_unpriced(sample_plan):
    prepaid = pricing.price_plan(sample_plan("tencent-prepaid"), load_book(cache=None))
    assert [i.item for i in prepaid.unpriced if "prepaid" in i.item]  # no public prepaid price: unpriced, not 0
    example = ROOT / "examples" / "prices.example.yaml"
    priced = pricing.price_plan(sample_plan("tencent-prepaid"), load_book(example, cache=None))
    assert [i.monthly for i in priced.items if "prepaid" in i.item] == [42000.0, 42000.0]
    [control] = [c for c in priced.controls if c["control"] == "capacity prepaid"]
    assert control["monthly_without"] - control["monthly_with"] == pytest.approx(2 * (80.0 * 730 - 42000), abs=0.1)


def test_a_block_bought_earlier_is_priced_over_its_hours(sample_plan):
    cost = pricing.price_plan(sample_plan("aws-reserved"), load_book(cache=None))
    blocks = [i for i in cost.items if "capacity_block" in i.item]
    assert len(blocks) == 2 and all(i.quantity == 336 and i.unit_price == 39.33 for i in blocks)
