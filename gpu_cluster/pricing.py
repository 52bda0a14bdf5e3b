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

import re

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from components import catalog
from components import run_windows
from components.headnode import HEAD_ROLE, ROLE_TAG
from components.spec import EXPECTED_HOURS_TAG
from gpu_cluster.plan import Plan, Resource, number
from gpu_cluster.pricebook import PriceBook, load_book
from gpu_cluster.pricebook.catalog import spot_discount

HOURS_PER_MONTH, WEEKS_PER_MONTH = run_windows.HOURS_PER_MONTH, run_windows.WEEKS_PER_MONTH


def weekly_hours(events: list[tuple[str, str]]) -> Optional[float]:
    """Hours a week the run windows keep the nodes up, from (start|stop, cron) events; None: no windows."""
    return run_windows.running_hours_a_week(events) if events else None



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

    @property
    def unpriced_summary(self) -> str:
        """What the total leaves out, in words: "2 × GPU nodes HCCPNV6.96XLARGE2304, NAT gateway (standard)"; ""
        when every line is priced. Lines of the same item are counted together."""
        return unpriced_summary([i.item for i in self.unpriced])

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
            "unpriced_summary": self.unpriced_summary,
            "usage_based": [asdict(i) for i in self.usage_based],
            "controls": list(self.controls),
        }


def unpriced_summary(items: list[str]) -> str:
    """The unpriced items' names, each once, counted: ["GPU nodes 1 × X", "GPU nodes 1 × X", "NAT gateway"] →
    "GPU nodes 2 × X, NAT gateway" (a count in the name is added up; other repeats are counted)."""
    counts: dict[tuple[str, str], int] = {}
    for item in items:
        m = re.fullmatch(r"(.*?)(\d+) × (.+)", item)
        key, n = ((m.group(1), m.group(3)), int(m.group(2))) if m else ((item, ""), 1)
        counts[key] = counts.get(key, 0) + n
    return ", ".join(f"{head}{n} × {tail}" if tail else (head if n == 1 else f"{n} × {head}")
                     for (head, tail), n in counts.items())


def total_words(total: float, currency: str, summary: str, amount=lambda v: f"{v:,.2f}") -> str:
    """The total as it may be said: "82,970.00 USD", or, when items are unpriced, a lower bound that names them on
    the same line: "≥ 32,357.00 CNY + unpriced: 2 × GPU nodes 1 × HCCPNV6.96XLARGE2304, NAT gateway (standard)"."""
    if not summary:
        return f"{amount(total)} {currency}"
    return f"≥ {amount(total)} {currency} + unpriced: {summary}"


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


class Pricer:
    """Prices one plan's lines against a book, in the cloud's currency. A cloud's bill (gpu_cluster/bills/)
    adds the lines of its resources, then the cost controls."""

    def __init__(self, book: PriceBook, cloud: str, currency: str, region: Optional[str]):
        self.book, self.cloud, self.region = book, cloud, region
        self.cost = MonthlyCost(currency=currency, sources=book.describe())
        self.unscheduled_extra = 0.0
        self.unexpected_extra = 0.0  # what the nodes would cost beyond expected_hours_a_month in their windows
        self.expected_hours: Optional[float] = None
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
        window = hours if scheduled else HOURS_PER_MONTH  # what the windows (or the month) allow
        expected = None if is_head(r) else expected_hours(r)
        runs = window if expected is None else min(expected, window)
        note = f"scheduled: {hours:.0f} of {HOURS_PER_MONTH} h a month" if scheduled else ""
        if runs < window:
            self.expected_hours = runs
            note = f"expected: {runs:g} of {HOURS_PER_MONTH} h a month (expected_hours_a_month)"
        qty = round(count * runs, 2)
        key = instance_type or "unknown"
        if not spot:
            self.add(label, r, "instance", key, qty, "instance-hour", note=note)
            line = self.cost.items[-1]
            if line.unit_price is not None:
                self.unscheduled_extra += line.unit_price * count * (HOURS_PER_MONTH - window)
                self.unexpected_extra += line.unit_price * count * (window - runs)
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
        if self.expected_hours is not None:
            out.append({"control": "expected_hours_a_month", "monthly_with": total,
                        "monthly_without": round(total + self.unexpected_extra, 2),
                        "note": f"the GPU nodes are priced for {self.expected_hours:g} h a month, the hours the "
                                f"stack expects them to run before idle_stop, the schedule or the budget stop "
                                f"stops them; each hour more costs its share"})
        if self.scheduled_hours is not None:
            out.append({"control": "schedule", "monthly_with": round(total + self.unexpected_extra, 2),
                        "monthly_without": round(total + self.unexpected_extra + self.unscheduled_extra, 2),
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
        if idle and self.expected_hours is not None:
            out.append({"control": "idle_stop", "monthly_with": total,
                        "monthly_without": round(total + self.unexpected_extra, 2),
                        "note": f"stops the nodes once idle, which keeps them to the {self.expected_hours:g} h a "
                                f"month expected"})
        elif idle:
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


def expected_hours(r: Resource) -> Optional[float]:
    """The hours a month a GPU node instance is expected to run (its expected_hours_a_month tag), or None."""
    tags = r.props.get("tags")
    value = number(tags.get(EXPECTED_HOURS_TAG)) if isinstance(tags, dict) else None
    return value if value is not None and 0 < value <= HOURS_PER_MONTH else None


def is_head(r: Resource) -> bool:
    """The Slurm head node: an instance tagged gpu-cluster:role=head (components/headnode.py ROLE_TAG)."""
    tags = r.props.get("tags")
    return isinstance(tags, dict) and tags.get(ROLE_TAG) == HEAD_ROLE


def price_plan(plan: Plan, book: Optional[PriceBook] = None) -> MonthlyCost:
    """The monthly cost of every priced resource in `plan`.

    `book` defaults to the committed price cache (prices/cache.json, when present) over the catalog.
    """
    from gpu_cluster.bills import bill_of

    bill = bill_of(_cloud(plan))
    if bill is None:
        return MonthlyCost(currency="USD")
    pricer = Pricer(book if book is not None else load_book(), bill.cloud, bill.currency, _region(plan))
    bill.price(pricer, plan)
    return pricer.cost


def pricer_for(book: PriceBook):
    """A one-argument pricer (plan → MonthlyCost) over `book`, for `run_policies(..., pricer=...)`."""
    return lambda plan: price_plan(plan, book)
