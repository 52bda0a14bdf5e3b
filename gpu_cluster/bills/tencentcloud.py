"""The bill of materials of a Tencent Cloud plan: the priced lines of every resource that costs, then the
cost controls (gpu_cluster/pricing.py prices each line against the price book)."""

from __future__ import annotations

import json
from typing import Optional

from components import run_windows
from gpu_cluster.bills import slurm as slurm_power
from gpu_cluster.plan import Plan, Resource, number
from gpu_cluster.pricebook import NO_KEY
from gpu_cluster.pricing import HOURS_PER_MONTH, WEEKS_PER_MONTH, Pricer, weekly_hours

TC_INSTANCE = "tencentcloud:Instance/instance:Instance"
TC_DISK = "tencentcloud:Cbs/storage:Storage"
TC_CFS = "tencentcloud:Cfs/fileSystem:FileSystem"
TC_NAT = "tencentcloud:Nat/gateway:Gateway"
TC_EIP = "tencentcloud:Eip/instance:Instance"
TC_BUCKET = "tencentcloud:Cos/bucket:Bucket"
TC_FUNCTION = "tencentcloud:Scf/function:Function"


COST_CONTROLS = "gpu-cluster:tencentcloud:CostControls"


def cost_controls_config(function: Resource, plan: Plan) -> Optional[dict]:
    """The configuration of a Tencent cost-controls function (its schedule, nodes and idle rule): what its
    component registers as the output `config` (components/tencentcloud/costcontrol.py), which a plan and a
    stack export both hold. None when the plan holds none (a plan from elsewhere, or an older render)."""
    component = plan.by_urn().get(function.parent)
    value = component.outputs.get("config") if component is not None and component.type == COST_CONTROLS else None
    try:
        config = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return None
    return config if isinstance(config, dict) else None


def scheduled_hours(plan: Plan) -> tuple[Optional[float], Optional[set[str]], bool]:
    """Hours a month the nodes run, their ids, and whether idle nodes are stopped: Slurm's, where it powers the
    nodes (their tags), else the cost-controls function's (its configuration: components/tencentcloud/costcontrol.py)."""
    slurm_idle = slurm_power.idle_stops(plan, TC_INSTANCE)
    slurm = slurm_power.scheduled_hours(plan, TC_INSTANCE)
    if slurm is not None:
        return slurm[0], slurm[1], slurm_idle
    if slurm_idle:
        return None, None, True
    for r in plan.of_type(TC_FUNCTION):
        # A plan without the configuration is priced as if the nodes ran all month.
        config = cost_controls_config(r, plan)
        if config is None:
            continue
        events = [run_windows.Event(a, tuple(days), minute) for a, days, minute in config.get("events") or []]
        weekly = weekly_hours([(e.action, e.cron()) for e in events])
        ids = set(config.get("nodes") or []) or None
        return (None if weekly is None else weekly * WEEKS_PER_MONTH), ids, bool(config.get("idle"))
    return None, None, False


def _lines(p: Pricer, plan: Plan) -> None:
    hours, scheduled_ids, _ = scheduled_hours(plan)
    p.scheduled_hours = hours
    for r in plan.of_type(TC_INSTANCE):
        charge = r.props.get("instanceChargeType")
        if charge == "PREPAID":
            months = number(r.props.get("instanceChargeTypePrepaidPeriod")) or 1
            p.reserved_node(r, "prepaid", r.props.get("instanceType"), "instance_prepaid_month", 1, "instance-month",
                            f"prepaid for {months:.0f} month(s) a term")
        else:
            mine = scheduled_ids is None or bool({r.id, r.outputs.get("id")} & scheduled_ids)
            p.node(r, r.props.get("instanceType"), 1, charge == "SPOTPAID", hours if mine else None)
        size = number(r.props.get("systemDiskSize"))
        if size:
            dtype = r.props.get("systemDiskType") or "CLOUD_PREMIUM"
            p.add(f"CBS system disk {dtype} {size:.0f} GB", r, "cbs_gb_month", dtype, size, "GB-month")
        for disk in r.props.get("dataDisks") or []:
            size = number(disk.get("dataDiskSize")) if isinstance(disk, dict) else None
            if size:
                dtype = disk.get("dataDiskType") or "CLOUD_PREMIUM"
                p.add(f"CBS {dtype} instance disk {size:.0f} GB", r, "cbs_gb_month", dtype, size, "GB-month")
    for r in plan.of_type(TC_DISK):
        size = number(r.props.get("storageSize")) or 0
        dtype = r.props.get("storageType") or "CLOUD_PREMIUM"
        p.add(f"CBS {dtype} {r.name} {size:.0f} GB", r, "cbs_gb_month", dtype, size, "GB-month")
    for r in plan.of_type(TC_CFS):
        size = number(r.props.get("capacity")) or 0
        kind = r.props.get("storageType") or ""
        p.add(f"CFS Turbo {kind} {size:.0f} GiB", r, "cfs_turbo_gib_month", kind or "unknown", size, "GiB-month")
    for r in plan.of_type(TC_NAT):
        # nat_product_version 2 is the standard NAT gateway, 1 (the provider's default) the traditional one.
        product = "STANDARD" if number(r.props.get("natProductVersion")) == 2 else "TRADITIONAL"
        p.add(f"NAT gateway ({product.lower()})", r, "nat_gateway_hour", product, HOURS_PER_MONTH, "hour",
              note="public traffic billed by use (see the EIP lines)")
    for r in plan.of_type(TC_EIP):
        p.add(f"EIP {r.name} public traffic", r, "eip_traffic_gb", NO_KEY, 0, "GB out", note="billed by use",
              usage=True)
    for r in plan.of_type(TC_BUCKET):
        p.add(f"COS bucket {r.name}", r, "cos_gb_month", "STANDARD", 0, "GB-month stored", note="billed by use",
              usage=True)






class TencentCloudBill:
    cloud = "tencentcloud"
    currency = "CNY"
    """The currency its totals are given in (the sample stacks' budgets)."""

    def price(self, p: Pricer, plan: Plan) -> None:
        _lines(p, plan)
        p.controls(plan, scheduled_hours(plan)[2], None)


BILL = TencentCloudBill()
