"""The bill of materials of an AWS plan: the priced lines of every resource that costs, then the cost
controls (gpu_cluster/pricing.py prices each line against the price book)."""

from __future__ import annotations

import json
from typing import Optional

from gpu_cluster.bills import slurm as slurm_power
from gpu_cluster.plan import Plan, Resource, number
from gpu_cluster.pricebook import NO_KEY
from gpu_cluster.pricing import HOURS_PER_MONTH, WEEKS_PER_MONTH, LineItem, Pricer, weekly_hours

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_VOLUME = "aws:ebs/volume:Volume"
AWS_FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
AWS_NAT = "aws:ec2/natGateway:NatGateway"
AWS_BUCKET = "aws:s3/bucket:Bucket"
AWS_SCHEDULE = "aws:scheduler/schedule:Schedule"
AWS_BLOCK = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"
AWS_BUDGET = "aws:budgets/budget:Budget"
AWS_BUDGET_ACTION = "aws:budgets/budgetAction:BudgetAction"
AWS_ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
BLOCK_HOURS_TAG = "gpu-cluster:block-hours"
BLOCK_SHAPE_TAG = "gpu-cluster:block-shape"
BLOCK_COUNT_TAG = "gpu-cluster:block-count"


def scheduled_hours(plan: Plan) -> tuple[Optional[float], Optional[set[str]]]:
    """Hours a month the scheduled instances run, and their ids (None: every instance of the plan): the run
    windows' EventBridge schedules, or, where Slurm powers the nodes, the hours a week their tag declares."""
    slurm = slurm_power.scheduled_hours(plan, AWS_INSTANCE)
    if slurm is not None:
        return slurm
    crons, ids, known = [], set(), True
    for r in plan.of_type(AWS_SCHEDULE):
        target = r.props.get("target") or {}
        arn = target.get("arn") if isinstance(target, dict) else None
        action = {"startInstances": "start", "stopInstances": "stop"}.get(str(arn).rsplit(":", 1)[-1])
        if action is None or not isinstance(r.props.get("scheduleExpression"), str):
            continue
        crons.append((action, r.props["scheduleExpression"]))
        try:
            ids |= set(json.loads(target.get("input"))["InstanceIds"])
        except (TypeError, ValueError, KeyError):
            known = False
    weekly = weekly_hours(crons)
    return (None, None) if weekly is None else (weekly * WEEKS_PER_MONTH, ids if known and ids else None)


def _lines(p: Pricer, plan: Plan) -> None:
    templates = _launch_templates(plan)
    hours, scheduled_ids = scheduled_hours(plan)
    p.scheduled_hours = hours
    _instance_lines(p, plan, templates, hours, scheduled_ids)
    _bought_block_lines(p, plan)
    _storage_and_network_lines(p, plan)


def _launch_templates(plan: Plan) -> dict[str, Resource]:
    """The plan's launch templates by every name an instance may give them: id, output id, name."""
    templates = {}
    for lt in plan.of_type(AWS_LAUNCH_TEMPLATE):
        for key in (lt.id, lt.outputs.get("id"), lt.name):
            if key:
                templates[key] = lt
    return templates


def _template_of(templates: dict[str, Resource], r: Resource) -> Optional[Resource]:
    ref = r.props.get("launchTemplate") or {}
    return templates.get(ref.get("id")) or templates.get(ref.get("name")) if isinstance(ref, dict) else None


def _root_disks(p: Pricer, lt: Optional[Resource], r: Resource, count: int) -> None:
    for bdm in (lt.props.get("blockDeviceMappings") or []) if lt else []:
        ebs = bdm.get("ebs") or {}
        size = number(ebs.get("volumeSize"))
        if size:
            p.add(f"EBS {ebs.get('volumeType') or 'gp3'} {bdm.get('deviceName', '')} {size:.0f} GB × {count}", r,
                  "ebs_gb_month", ebs.get("volumeType") or "gp3", size * count, "GB-month")


def _instance_lines(p: Pricer, plan: Plan, templates: dict[str, Resource], hours: Optional[float],
                    scheduled_ids: Optional[set[str]]) -> None:
    """Every instance: its node line (on demand, spot or in a Capacity Block) and its root disk."""
    blocks = [number((b.props.get("tags") or {}).get(BLOCK_HOURS_TAG)) for b in plan.of_type(AWS_BLOCK)]
    block_hours = next((h for h in blocks if h), None)
    for r in plan.of_type(AWS_INSTANCE):
        lt = _template_of(templates, r)
        itype = r.props.get("instanceType") or (lt.props.get("instanceType") if lt else None)
        market = (r.props.get("instanceMarketOptions") or {}).get("marketType") or (
            ((lt.props.get("instanceMarketOptions") or {}).get("marketType")) if lt else None)
        if market == "capacity-block":
            block_hours = _capacity_block_node(p, r, itype, block_hours)
        else:
            mine = scheduled_ids is None or bool({r.id, r.outputs.get("id")} & scheduled_ids)
            p.node(r, itype, 1, market == "spot", hours if mine else None)
        if lt is not None:
            _root_disks(p, lt, r, 1)
        else:
            root = r.props.get("rootBlockDevice") or {}
            size = number(root.get("volumeSize")) if isinstance(root, dict) else None
            if size:
                vtype = root.get("volumeType") or "gp3"
                p.add(f"EBS {vtype} root of {r.name} {size:.0f} GB", r, "ebs_gb_month", vtype, size, "GB-month")


def _capacity_block_node(p: Pricer, r: Resource, itype: Optional[str],
                         block_hours: Optional[float]) -> Optional[float]:
    """The line of a node in a Capacity Block; the block's hours as the next node should see them."""
    hours_here = number((r.props.get("tags") or {}).get(BLOCK_HOURS_TAG)) or block_hours
    if hours_here:
        block_hours = hours_here
        month_hours = min(block_hours, HOURS_PER_MONTH)
        p.reserved_node(r, "capacity_block", itype, "capacity_block_hour", month_hours,
                        "instance-hour", f"paid up front for the whole block: {block_hours:.0f} h"
                        + (f", {HOURS_PER_MONTH} h of it a month" if block_hours > HOURS_PER_MONTH else ""),
                        hours=month_hours)
    else:
        p.cost.items.append(LineItem(
            item=f"GPU node {itype} (capacity_block)", urn=r.urn, quantity=0, unit="instance-hour",
            unit_price=None, monthly=None, source="a Capacity Block bought outside this stack",
            note="unpriced: paid when the block was bought"))
    return block_hours


def _bought_block_lines(p: Pricer, plan: Plan) -> None:
    """Capacity Blocks no instance runs in yet, each node of them paid in full this month."""
    in_blocks = any(((r.props.get("instanceMarketOptions") or {}).get("marketType")) == "capacity-block"
                    for r in plan.of_type(AWS_INSTANCE))
    for b in plan.of_type(AWS_BLOCK) if not in_blocks else []:
        # Bought by this update, before any node can launch into it (components/aws/compute.py).
        tags = b.props.get("tags") or {}
        hours, count = number(tags.get(BLOCK_HOURS_TAG)), int(number(tags.get(BLOCK_COUNT_TAG)) or 0)
        if hours and count:
            # AWS charges the whole block when it is bought, so this month carries all of it.
            for _ in range(count):
                p.reserved_node(b, "capacity_block", tags.get(BLOCK_SHAPE_TAG), "capacity_block_hour", hours,
                                "instance-hour", f"bought by this update, all {hours:.0f} h paid up front this "
                                f"month; the nodes launch once it starts", hours=hours)


def _storage_and_network_lines(p: Pricer, plan: Plan) -> None:
    for r in plan.of_type(AWS_VOLUME):
        size = number(r.props.get("size")) or 0
        vtype = r.props.get("type") or "gp3"
        p.add(f"EBS {vtype} {r.name} {size:.0f} GB", r, "ebs_gb_month", vtype, size, "GB-month")
    for r in plan.of_type(AWS_FSX):
        size = number(r.props.get("storageCapacity")) or 0
        tput = int(number(r.props.get("perUnitStorageThroughput")) or 0)
        p.add(f"FSx for Lustre {size:.0f} GiB at {tput} MB/s/TiB", r, "fsx_lustre_gb_month", str(tput), size,
              "GB-month")
    for r in plan.of_type(AWS_NAT):
        p.add("NAT gateway", r, "nat_gateway_hour", NO_KEY, HOURS_PER_MONTH, "hour",
              note="data processed not estimated")
    for r in plan.of_type(AWS_BUCKET):
        p.add(f"S3 bucket {r.name}", r, "s3_gb_month", "STANDARD", 0, "GB-month stored", note="billed by use",
              usage=True)


def budget_cap(plan: Plan) -> Optional[tuple[float, float]]:
    """(spend at which the budget action stops the nodes, its %), from the budget and its action."""
    for action in plan.of_type(AWS_BUDGET_ACTION):
        threshold = action.props.get("actionThreshold") or {}
        pct = number(threshold.get("actionThresholdValue"))
        if threshold.get("actionThresholdType") != "PERCENTAGE" or pct is None:
            continue
        for budget in plan.of_type(AWS_BUDGET):
            limit = number(budget.props.get("limitAmount"))
            if limit is not None:
                return round(limit * pct / 100, 2), pct
    return None




class AwsBill:
    cloud = "aws"
    currency = "USD"
    """The currency its totals are given in (the sample stacks' budgets)."""

    def price(self, p: Pricer, plan: Plan) -> None:
        _lines(p, plan)
        idle = any(any(str(a).endswith(":ec2:stop") for a in r.props.get("alarmActions") or [])
                   for r in plan.of_type(AWS_ALARM)) or slurm_power.idle_stops(plan, AWS_INSTANCE)
        p.controls(plan, idle, budget_cap(plan))


BILL = AwsBill()
