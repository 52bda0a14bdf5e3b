"""Monthly price of a plan from the catalog (pure functions over a Plan; no Pulumi).

Works on plan files and `pulumi stack export` files alike. Every line item names the catalog
source of its price. A resource whose price nobody published is an *unpriced* item — listed, never
counted as zero — and a usage-billed resource (buckets, data transfer) is listed with its unit
price but not estimated.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from components import catalog
from gpu_cluster.plan import Plan, Resource, number

HOURS_PER_MONTH = 730

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_ASG = "aws:autoscaling/group:Group"
AWS_VOLUME = "aws:ebs/volume:Volume"
AWS_FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
AWS_NAT = "aws:ec2/natGateway:NatGateway"
AWS_BUCKET = "aws:s3/bucket:Bucket"
TC_INSTANCE = "tencentcloud:Instance/instance:Instance"
TC_DISK = "tencentcloud:Cbs/storage:Storage"
TC_CFS = "tencentcloud:Cfs/fileSystem:FileSystem"
TC_NAT = "tencentcloud:Nat/gateway:Gateway"
TC_BUCKET = "tencentcloud:Cos/bucket:Bucket"


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


@dataclass
class MonthlyCost:
    currency: str
    items: list[LineItem] = field(default_factory=list)
    usage_based: list[LineItem] = field(default_factory=list)

    @property
    def total(self) -> float:
        return round(sum(i.monthly for i in self.items if i.monthly is not None), 2)

    @property
    def unpriced(self) -> list[LineItem]:
        return [i for i in self.items if i.monthly is None]

    @property
    def estimate(self) -> bool:
        return any(i.estimate for i in self.items)

    def as_dict(self) -> dict[str, Any]:
        return {
            "currency": self.currency,
            "total": self.total,
            "estimate": self.estimate,
            "items": [asdict(i) for i in self.items if i.monthly is not None],
            "unpriced": [asdict(i) for i in self.unpriced],
            "usage_based": [asdict(i) for i in self.usage_based],
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


def _node_item(cloud: str, r: Resource, instance_type: Optional[str], count: int, spot: bool,
               region: Optional[str]) -> LineItem:
    shape = catalog.shape(cloud, instance_type) if instance_type else None
    what = f"{count} × {instance_type or 'unknown type'}" + (" spot" if spot else "")
    if shape is None or shape.price_hourly is None:
        why = "not in the catalog" if shape is None else "no public on-demand price"
        return LineItem(item=f"GPU nodes {what}", urn=r.urn, quantity=count * HOURS_PER_MONTH,
                        unit="instance-hour", unit_price=None, monthly=None,
                        source=", ".join(shape.source) if shape else "", note=why)
    hourly, estimate, notes = shape.price_hourly, False, []
    if spot:
        discount = catalog.prices(cloud)["spot_discount"].get(shape.type)
        if discount:
            hourly = round(hourly * (1 - discount["value"]), 6)
            notes.append(f"spot at {discount['value']:.0%} off on-demand ({discount['source']})")
        else:
            notes.append("spot priced at on-demand: no current spot discount in the catalog (upper bound)")
        estimate = True
    if shape.price_region and region and region != shape.price_region:
        estimate = True
        notes.append(f"priced at {shape.price_region} rates; {region} not catalogued")
    return LineItem(item=f"GPU nodes {what}", urn=r.urn, quantity=count * HOURS_PER_MONTH,
                    unit="instance-hour", unit_price=hourly,
                    monthly=round(hourly * HOURS_PER_MONTH * count, 2),
                    source=", ".join(shape.source), estimate=estimate, note="; ".join(notes))


def _per_unit(item: str, r: Resource, quantity: float, unit: str, entry: dict, estimate: bool = False,
              note: str = "") -> LineItem:
    price = entry.get("price")
    if entry.get("unconfirmed"):
        estimate = True
        note = "; ".join(filter(None, [note, "price from a third-party source, not AWS's table"]))
    return LineItem(item=item, urn=r.urn, quantity=quantity, unit=unit, unit_price=price,
                    monthly=None if price is None else round(price * quantity, 2),
                    source=entry["source"], estimate=estimate, note=note)


def _aws(plan: Plan, region: Optional[str]) -> MonthlyCost:
    p = catalog.prices("aws")
    cost = MonthlyCost(currency=p["currency"])
    off_region = bool(region and region != p["region"])
    region_note = f"priced at {p['region']} rates" if off_region else ""
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
            size = number((bdm.get("ebs") or {}).get("volumeSize"))
            if size:
                cost.items.append(_per_unit(f"EBS gp3 {bdm.get('deviceName', '')} {size:.0f} GB × {count}", r,
                                            size * count, "GB-month", p["ebs_gp3_gb_month"],
                                            off_region, region_note))

    for r in plan.of_type(AWS_INSTANCE):
        lt = template_of(r)
        itype = r.props.get("instanceType") or (lt.props.get("instanceType") if lt else None)
        market = (r.props.get("instanceMarketOptions") or {}).get("marketType") or (
            ((lt.props.get("instanceMarketOptions") or {}).get("marketType")) if lt else None)
        cost.items.append(_node_item("aws", r, itype, 1, market == "spot", region))
        root_disks(lt, r, 1)
    for r in plan.of_type(AWS_ASG):
        lt = template_of(r)
        count = int(number(r.props.get("desiredCapacity")) or number(r.props.get("minSize")) or 0)
        dist = ((r.props.get("mixedInstancesPolicy") or {}).get("instancesDistribution") or {})
        base = int(number(dist.get("onDemandBaseCapacity")) or 0)
        above = number(dist.get("onDemandPercentageAboveBaseCapacity"))
        spot = 0 if not dist else round((count - base) * (1 - (above if above is not None else 100) / 100))
        itype = lt.props.get("instanceType") if lt else None
        if count - spot:
            cost.items.append(_node_item("aws", r, itype, count - spot, False, region))
        if spot:
            cost.items.append(_node_item("aws", r, itype, spot, True, region))
        root_disks(lt, r, count)
    for r in plan.of_type(AWS_VOLUME):
        size = number(r.props.get("size")) or 0
        cost.items.append(_per_unit(f"EBS {r.props.get('type', 'gp3')} {r.name} {size:.0f} GB", r, size,
                                    "GB-month", p["ebs_gp3_gb_month"], off_region, region_note))
    for r in plan.of_type(AWS_FSX):
        size = number(r.props.get("storageCapacity")) or 0
        tput = int(number(r.props.get("perUnitStorageThroughput")) or 0)
        entry = p["fsx_lustre_persistent2_gb_month"].get(tput, {"price": None, "source": "not catalogued"})
        cost.items.append(_per_unit(f"FSx for Lustre {size:.0f} GiB at {tput} MB/s/TiB", r, size,
                                    "GB-month", entry, off_region, region_note))
    for r in plan.of_type(AWS_NAT):
        cost.items.append(_per_unit("NAT gateway", r, HOURS_PER_MONTH, "hour", p["nat_gateway_hour"],
                                    off_region, "; ".join(filter(None, [region_note, "data processed not estimated"]))))
    for r in plan.of_type(AWS_BUCKET):
        cost.usage_based.append(_per_unit(f"S3 bucket {r.name}", r, 0, "GB-month stored",
                                          p["s3_standard_gb_month"], note="billed by use"))
    return cost


def _tencent(plan: Plan, region: Optional[str]) -> MonthlyCost:
    p = catalog.prices("tencentcloud")
    cost = MonthlyCost(currency=p["currency"])
    for r in plan.of_type(TC_INSTANCE):
        spot = r.props.get("instanceChargeType") == "SPOTPAID"
        cost.items.append(_node_item("tencentcloud", r, r.props.get("instanceType"), 1, spot, region))
        size = number(r.props.get("systemDiskSize"))
        if size:
            cost.items.append(_per_unit(f"CBS system disk {size:.0f} GB", r, size, "GB-month", p["cbs_gb_month"]))
        for disk in r.props.get("dataDisks") or []:
            size = number(disk.get("dataDiskSize")) if isinstance(disk, dict) else None
            if size:
                cost.items.append(_per_unit(f"CBS {disk.get('dataDiskType', '')} instance disk {size:.0f} GB", r,
                                            size, "GB-month", p["cbs_gb_month"]))
    for r in plan.of_type(TC_DISK):
        size = number(r.props.get("storageSize")) or 0
        cost.items.append(_per_unit(f"CBS {r.props.get('storageType', '')} {r.name} {size:.0f} GB", r, size,
                                    "GB-month", p["cbs_gb_month"]))
    for r in plan.of_type(TC_CFS):
        size = number(r.props.get("capacity")) or 0
        cost.items.append(_per_unit(f"CFS Turbo {r.props.get('storageType', '')} {size:.0f} GiB", r, size,
                                    "GiB-month", p["cfs_turbo_gib_month"]))
    for r in plan.of_type(TC_NAT):
        cost.items.append(_per_unit("NAT gateway", r, HOURS_PER_MONTH, "hour", p["nat_gateway_hour"]))
    for r in plan.of_type(TC_BUCKET):
        cost.usage_based.append(_per_unit(f"COS bucket {r.name}", r, 0, "GB-month stored",
                                          p["cos_standard_gb_month"], note="billed by use"))
    return cost


def price_plan(plan: Plan) -> MonthlyCost:
    """The monthly cost of every priced resource in `plan`, by catalog price."""
    cloud, region = _cloud(plan), _region(plan)
    if cloud == "aws":
        return _aws(plan, region)
    if cloud == "tencentcloud":
        return _tencent(plan, region)
    return MonthlyCost(currency="USD")
