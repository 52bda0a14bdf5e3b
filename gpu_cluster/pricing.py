"""Monthly price of a plan from its price book (pure functions over a Plan; no Pulumi).

Works on plan files and `pulumi stack export` files alike. Prices come from a `PriceBook`
(gpu_cluster/prices): a user price file, then the committed price cache, then the public catalog —
every line item names the origin, source and date of its price. A resource whose price no source
gives is an *unpriced* item — listed, never counted as zero — and a usage-billed resource (buckets,
public traffic) is listed with its unit price but not estimated. A price quoted in another currency
than the cloud's total (Tencent's international-site USD figures in a CNY total) is converted at the
book's dated exchange rate and flagged as an estimate.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from components import catalog
from components import windows as run_windows
from components.headnode import HEAD_ROLE, ROLE_TAG
from components.tencentcloud.scf_cost_controls import CONFIG_FILE
from gpu_cluster.plan import Plan, Resource, number
from gpu_cluster.prices import NO_KEY, ROOT, PriceBook, load_book
from gpu_cluster.prices.catalog import spot_discount

HOURS_PER_MONTH = 730

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_VOLUME = "aws:ebs/volume:Volume"
AWS_FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
AWS_NAT = "aws:ec2/natGateway:NatGateway"
AWS_BUCKET = "aws:s3/bucket:Bucket"
TC_INSTANCE = "tencentcloud:Instance/instance:Instance"
TC_DISK = "tencentcloud:Cbs/storage:Storage"
TC_CFS = "tencentcloud:Cfs/fileSystem:FileSystem"
TC_NAT = "tencentcloud:Nat/gateway:Gateway"
TC_EIP = "tencentcloud:Eip/instance:Instance"
TC_BUCKET = "tencentcloud:Cos/bucket:Bucket"
AWS_SCHEDULE = "aws:scheduler/schedule:Schedule"
AWS_BLOCK = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"
AWS_BUDGET = "aws:budgets/budget:Budget"
AWS_BUDGET_ACTION = "aws:budgets/budgetAction:BudgetAction"
AWS_ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
TC_FUNCTION = "tencentcloud:Scf/function:Function"
BLOCK_HOURS_TAG = "gpu-cluster:block-hours"
BLOCK_SHAPE_TAG = "gpu-cluster:block-shape"
BLOCK_COUNT_TAG = "gpu-cluster:block-count"
WEEKS_PER_MONTH = HOURS_PER_MONTH / run_windows.HOURS_PER_WEEK

CURRENCY = {"aws": "USD", "tencentcloud": "CNY"}
"""The currency each cloud's total is given in (the sample stacks' budgets)."""


@dataclass(frozen=True)
class LineItem:
    item: str
    urn: str
    quantity: float
    unit: str
    unit_price: Optional[float]
    monthly: Optional[float]
    source: str
    estimate: bool = False
    note: str = ""
    origin: str = ""
    """Which source priced it: "price file", "cache", "catalog"; "" when unpriced."""
    as_of: str = ""
    """The date of that price."""
    lookup: str = ""
    """What was looked up: `cloud item key @ region` (the key a price file or cache entry needs)."""


@dataclass
class MonthlyCost:
    currency: str
    items: list[LineItem] = field(default_factory=list)
    usage_based: list[LineItem] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    """The price book's sources in precedence order, its discounts and exchange rate."""
    controls: list[dict[str, Any]] = field(default_factory=list)
    """Each cost control of the plan: the monthly cost with it and without it (None: not estimated)."""

    @property
    def total(self) -> float:
        return round(sum(i.monthly for i in self.items if i.monthly is not None), 2)

    @property
    def unpriced(self) -> list[LineItem]:
        return [i for i in self.items if i.monthly is None]

    @property
    def estimate(self) -> bool:
        return any(i.estimate for i in self.items)

    def by_origin(self) -> dict[str, float]:
        """Monthly total per price origin (price file / cache / catalog)."""
        out: dict[str, float] = {}
        for i in self.items:
            if i.monthly is not None:
                out[i.origin] = round(out.get(i.origin, 0.0) + i.monthly, 2)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "currency": self.currency,
            "total": self.total,
            "estimate": self.estimate,
            "by_origin": self.by_origin(),
            "price_sources": list(self.sources),
            "items": [asdict(i) for i in self.items if i.monthly is not None],
            "unpriced": [asdict(i) for i in self.unpriced],
            "usage_based": [asdict(i) for i in self.usage_based],
            "controls": list(self.controls),
        }


def _region(plan: Plan) -> Optional[str]:
    for r in plan.resources:
        if r.type.startswith("pulumi:providers:"):
            region = r.props.get("region")
            if isinstance(region, str):
                return region
    return None


def _cloud(plan: Plan) -> Optional[str]:
    for r in plan.custom():
        package = r.type.split(":", 1)[0]
        if package in catalog.CLOUDS:
            return package
    return None


class _Pricer:
    """Prices one plan's lines against a book, in the cloud's currency."""

    def __init__(self, book: PriceBook, cloud: str, region: Optional[str]):
        self.book, self.cloud, self.region = book, cloud, region
        self.cost = MonthlyCost(currency=CURRENCY[cloud], sources=book.describe())
        self.unscheduled_extra = 0.0
        """What the scheduled nodes would add running around the clock."""
        self.scheduled_hours: Optional[float] = None
        self.reserved: list[tuple[str, float, Optional[float]]] = []
        """(capacity type, monthly cost of the reserved nodes, their on-demand monthly cost)."""

    def unit(self, item: str, key: str) -> tuple[Optional[float], dict[str, Any]]:
        """The unit price of `item`/`key` in the cost's currency, and the line's provenance fields."""
        lookup = f"{self.cloud} {item} {key} @ {self.region or 'any region'}"
        price = self.book.lookup(self.cloud, item, key, self.region)
        if price is None:
            return None, {"source": "no price in the price file, the cache or the catalog", "lookup": lookup,
                          "note": "unpriced"}
        value, notes, estimate = price.value, [price.note] if price.note else [], price.estimate
        if price.currency != self.cost.currency:
            value = round(self.book.rate.convert(value, price.currency, self.cost.currency), 8)
            notes.append(f"{price.value:g} {price.currency} converted at {self.book.rate.label}")
            estimate = True
        return value, {"source": price.source, "origin": price.origin, "as_of": price.as_of, "lookup": lookup,
                       "estimate": estimate, "note": "; ".join(notes)}

    def add(self, label: str, r: Resource, item: str, key: str, quantity: float, unit: str,
            factor: float = 1.0, note: str = "", usage: bool = False) -> None:
        """A line: `quantity` × unit price × `factor` (730 for hourly prices of monthly lines)."""
        price, meta = self.unit(item, key)
        if price is None:
            meta["note"] = "; ".join(filter(None, ["unpriced", note]))
        else:
            meta["note"] = "; ".join(filter(None, [meta.get("note"), note]))
        line = LineItem(item=label, urn=r.urn, quantity=quantity, unit=unit,
                        unit_price=None if price is None else round(price * factor, 6),
                        monthly=None if price is None or usage else round(price * factor * quantity, 2), **meta)
        (self.cost.usage_based if usage else self.cost.items).append(line)

    def node(self, r: Resource, instance_type: Optional[str], count: int, spot: bool,
             hours: Optional[float] = None) -> None:
        """Node lines: on-demand or spot, for `hours` a month each (all month unless scheduled). GPU
        nodes, or the Slurm head node when the instance is tagged as one (components/headnode.py)."""
        what = f"{count} × {instance_type or 'unknown type'}" + (" spot" if spot else "")
        label = f"head node {what}" if is_head(r) else f"GPU nodes {what}"
        scheduled = hours is not None and hours < HOURS_PER_MONTH
        qty = round(count * (hours if scheduled else HOURS_PER_MONTH), 2)
        note = f"scheduled: {hours:.0f} of {HOURS_PER_MONTH} h a month" if scheduled else ""
        key = instance_type or "unknown"
        if not spot:
            self.add(label, r, "instance", key, qty, "instance-hour", note=note)
            line = self.cost.items[-1]
            if scheduled and line.unit_price is not None:
                self.unscheduled_extra += line.unit_price * count * (HOURS_PER_MONTH - hours)
            return
        price, meta = self.unit("instance_spot", key)
        if price is not None:
            self.cost.items.append(LineItem(item=label, urn=r.urn, quantity=qty, unit="instance-hour",
                                            unit_price=price, monthly=round(price * qty, 2), **meta))
            return
        price, meta = self.unit("instance", key)
        notes = [meta.get("note", "")] if price is not None else []
        discount = spot_discount(self.cloud, key)
        if price is not None and discount:
            price = round(price * (1 - discount["value"]), 6)
            notes.append(f"spot at {discount['value']:.0%} off on-demand ({discount['source']})")
        elif price is not None:
            notes.append("spot priced at on-demand: no current spot discount in the catalog (upper bound)")
        meta.update(estimate=True, note="; ".join(filter(None, notes)) if price is not None else "unpriced")
        self.cost.items.append(LineItem(item=label, urn=r.urn, quantity=qty, unit="instance-hour", unit_price=price,
                                        monthly=None if price is None else round(price * qty, 2), **meta))

    def reserved_node(self, r: Resource, kind: str, instance_type: Optional[str], item: str, quantity: float,
                      unit: str, note: str, hours: float = HOURS_PER_MONTH) -> None:
        """A node whose capacity is bought ahead (a Capacity Block, a prepaid term), beside what the same
        `hours` of it would cost on demand."""
        key = instance_type or "unknown"
        self.add(f"GPU node {key} ({kind})", r, item, key, quantity, unit, note=note)
        line = self.cost.items[-1]
        on_demand, _ = self.unit("instance", key)
        self.reserved.append((kind, line.monthly if line.monthly is not None else None,
                              None if on_demand is None else round(on_demand * hours, 2)))

    def controls(self, plan: Plan, idle: bool, budget_cap: Optional[tuple[float, float]]) -> None:
        """The cost with and without each control, once every line is priced."""
        total, out = self.cost.total, self.cost.controls
        if self.scheduled_hours is not None:
            out.append({"control": "schedule", "monthly_with": total,
                        "monthly_without": round(total + self.unscheduled_extra, 2),
                        "note": f"the nodes run {self.scheduled_hours:.0f} of {HOURS_PER_MONTH} h a month"})
        for kind in sorted({k for k, _, _ in self.reserved}):
            rows = [row for row in self.reserved if row[0] == kind]
            reserved = [m for _, m, _ in rows]
            on_demand = [o for _, _, o in rows]
            priced = None not in reserved
            out.append({"control": f"capacity {kind}",
                        "monthly_with": total if priced else None,
                        "monthly_without": (round(total - sum(m for m in reserved if m) + sum(on_demand), 2)
                                            if None not in on_demand else None),
                        "note": "against the same node hours on demand"
                                + ("" if priced else f"; no {kind} price in any source, so the cost with it is "
                                                     f"unknown")})
        if idle:
            out.append({"control": "idle_stop", "monthly_with": None, "monthly_without": total,
                        "note": "saves the hours the nodes sit idle: not estimated, it depends on use"})
        if budget_cap is not None:
            cap, pct = budget_cap
            nodes = sum(i.monthly for i in self.cost.items if i.item.startswith("GPU node") and i.monthly is not None)
            bound = round(min(total, cap + (total - nodes)), 2)
            out.append({"control": "budget.stop_at_pct", "monthly_with": bound, "monthly_without": total,
                        "note": f"the GPU nodes stop once actual spend reaches {pct:g} % of the budget ({cap:g}) and "
                                f"the rest keeps billing; AWS Budgets refreshes spend up to three times a day, so the "
                                f"nodes may run some hours past it"})


def is_head(r: Resource) -> bool:
    """The Slurm head node: an instance tagged gpu-cluster:role=head (components/headnode.py ROLE_TAG)."""
    tags = r.props.get("tags")
    return isinstance(tags, dict) and tags.get(ROLE_TAG) == HEAD_ROLE


def _weekly_hours(events: list[tuple[str, str]]) -> Optional[float]:
    return run_windows.running_hours_a_week(events) if events else None


def _aws_schedule(plan: Plan) -> tuple[Optional[float], Optional[set[str]]]:
    """Hours a month the scheduled instances run, and their ids (None: every instance of the plan)."""
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
    weekly = _weekly_hours(crons)
    return (None, None) if weekly is None else (weekly * WEEKS_PER_MONTH, ids if known and ids else None)


def _aws(p: _Pricer, plan: Plan) -> None:
    templates = {}
    for lt in plan.of_type(AWS_LAUNCH_TEMPLATE):
        for key in (lt.id, lt.outputs.get("id"), lt.name):
            if key:
                templates[key] = lt

    def template_of(r: Resource) -> Optional[Resource]:
        ref = r.props.get("launchTemplate") or {}
        return templates.get(ref.get("id")) or templates.get(ref.get("name")) if isinstance(ref, dict) else None

    def root_disks(lt: Optional[Resource], r: Resource, count: int) -> None:
        for bdm in (lt.props.get("blockDeviceMappings") or []) if lt else []:
            ebs = bdm.get("ebs") or {}
            size = number(ebs.get("volumeSize"))
            if size:
                p.add(f"EBS {ebs.get('volumeType') or 'gp3'} {bdm.get('deviceName', '')} {size:.0f} GB × {count}", r,
                      "ebs_gb_month", ebs.get("volumeType") or "gp3", size * count, "GB-month")

    hours, scheduled_ids = _aws_schedule(plan)
    p.scheduled_hours = hours
    blocks = [number((b.props.get("tags") or {}).get(BLOCK_HOURS_TAG)) for b in plan.of_type(AWS_BLOCK)]
    block_hours = next((h for h in blocks if h), None)
    for r in plan.of_type(AWS_INSTANCE):
        lt = template_of(r)
        itype = r.props.get("instanceType") or (lt.props.get("instanceType") if lt else None)
        market = (r.props.get("instanceMarketOptions") or {}).get("marketType") or (
            ((lt.props.get("instanceMarketOptions") or {}).get("marketType")) if lt else None)
        if market == "capacity-block":
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
        else:
            mine = scheduled_ids is None or bool({r.id, r.outputs.get("id")} & scheduled_ids)
            p.node(r, itype, 1, market == "spot", hours if mine else None)
        if lt is not None:
            root_disks(lt, r, 1)
        else:
            root = r.props.get("rootBlockDevice") or {}
            size = number(root.get("volumeSize")) if isinstance(root, dict) else None
            if size:
                vtype = root.get("volumeType") or "gp3"
                p.add(f"EBS {vtype} root of {r.name} {size:.0f} GB", r, "ebs_gb_month", vtype, size, "GB-month")
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


def cost_controls_config(function: Resource) -> Optional[dict]:
    """The configuration in the code package of a Tencent cost-controls function, as a render of this
    checkout wrote it (None when the package is not here or holds none)."""
    # zip_file is a path relative to the project; the package's config.json holds the schedule.
    try:
        with zipfile.ZipFile(ROOT / str(function.props.get("zipFile"))) as package:
            config = json.loads(package.read(CONFIG_FILE))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return config if isinstance(config, dict) else None


def _tencent_schedule(plan: Plan) -> tuple[Optional[float], Optional[set[str]], bool]:
    """Hours a month the cost-controls function keeps its nodes running, their ids, and whether it
    stops idle nodes (its configuration: components/tencentcloud/costcontrol.py)."""
    for r in plan.of_type(TC_FUNCTION):
        # A plan from elsewhere whose package is not here is priced as if the nodes ran all month.
        config = cost_controls_config(r)
        if config is None:
            continue
        events = [run_windows.Event(a, tuple(days), minute) for a, days, minute in config.get("events") or []]
        weekly = _weekly_hours([(e.action, e.cron()) for e in events])
        ids = set(config.get("nodes") or []) or None
        return (None if weekly is None else weekly * WEEKS_PER_MONTH), ids, bool(config.get("idle"))
    return None, None, False


def _tencent(p: _Pricer, plan: Plan) -> None:
    hours, scheduled_ids, _ = _tencent_schedule(plan)
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


def price_plan(plan: Plan, book: Optional[PriceBook] = None) -> MonthlyCost:
    """The monthly cost of every priced resource in `plan`.

    `book` defaults to the committed price cache (prices/cache.json, when present) over the catalog.
    """
    cloud, region = _cloud(plan), _region(plan)
    if cloud not in CURRENCY:
        return MonthlyCost(currency="USD")
    pricer = _Pricer(book if book is not None else load_book(), cloud, region)
    (_aws if cloud == "aws" else _tencent)(pricer, plan)
    if cloud == "aws":
        idle = any(any(str(a).endswith(":ec2:stop") for a in r.props.get("alarmActions") or [])
                   for r in plan.of_type(AWS_ALARM))
        pricer.controls(plan, idle, _aws_budget_cap(plan))
    else:
        pricer.controls(plan, _tencent_schedule(plan)[2], None)
    return pricer.cost


def _aws_budget_cap(plan: Plan) -> Optional[tuple[float, float]]:
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


def pricer_for(book: PriceBook):
    """A one-argument pricer (plan → MonthlyCost) over `book`, for `run_policies(..., pricer=...)`."""
    return lambda plan: price_plan(plan, book)
