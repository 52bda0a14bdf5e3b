"""The stack file's `gpu-cluster:cluster` value (docs/architecture.md): pydantic models and `load_spec`.

All input validation lives here. `load_spec` returns a `Cluster` — the validated spec with every
tier default filled in, the catalogued shape and the notes the plan must say aloud — or raises one
`SpecError` listing every problem, each naming the field, the value and what is allowed. Nothing is
registered with Pulumi before this succeeds.
"""

from __future__ import annotations

import datetime
import ipaddress
import math
import re
from functools import lru_cache
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError, field_validator

from components import catalog, clouds, messages, run_windows, tiers
from components.catalog import Cloud, Shape
from components.tiers import Tier

Criticality = Literal["critical", "standard", "experimental"]
Purchase = Literal["on_demand", "spot", "mixed"]
Scratch = Literal["nvme", "disk", "none"]
Scheduler = Literal["slurm", "none"]

NAME_TAG = "gpu-cluster:name"
"""The tag naming a resource's cluster: budgets filter cost on it (both clouds)."""
NODE_TAG = "gpu-cluster:node"
"""On a GPU node instance: its index in the cluster (Slurm's node name; how power saving finds its instance)."""

_EMAIL = re.compile(r"^[^@\s]+@[^@\s.]+(?:\.[^@\s.]+)+$")
"""local@domain.tld. The domain's labels exclude the dot that separates them, so a hostile address cannot
make the match backtrack (x@....@ took quadratic time when the domain was any run of non-blanks, a dot and
another run); an address is also at most EMAIL_MAX characters."""
EMAIL_MAX = 254
"""The longest e-mail address SMTP carries (RFC 5321 §4.5.3.1.3: a path of 256 octets, less the brackets)."""
_NAME = re.compile(r"[a-z](?:[a-z0-9]|-(?=[a-z0-9])){1,23}")
"""Cluster names: a lower-case letter, then letters, digits and single hyphens, 2-24 characters, ending
in a letter or digit — valid inside every physical name derived from it (S3 and COS bucket names,
IAM roles, Tencent resource names)."""
MAX_BUDGET = 100_000_000
"""Largest monthly budget accepted, in any currency: well above any cluster of 64 nodes for a month,
small enough that a misplaced digit is caught."""
Money = Annotated[float, Field(strict=True, allow_inf_nan=False)]
_PRIVATE_V4 = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
_ID_PATTERNS: dict[tuple[Cloud, str], str] = {
    ("aws", "image_id"): r"ami-[0-9a-f]{8,17}",
    ("tencentcloud", "image_id"): r"img-[0-9a-z]{8}",
    ("aws", "existing_subnet_id"): r"subnet-[0-9a-f]{8,17}",
    ("tencentcloud", "existing_subnet_id"): r"subnet-[0-9a-z]{8}",
}


@lru_cache(maxsize=1)
def _time_zones() -> frozenset[str]:
    """Geographic IANA names (Area/Location, and UTC) that the tzdata package ships: what EventBridge
    Scheduler takes and what the Tencent function carries. POSIX-style and special entries
    (EST5EDT, Factory, localtime, posixrules) are left out."""
    import zoneinfo
    from importlib import resources

    shipped = resources.files("tzdata.zoneinfo")
    return frozenset(z for z in zoneinfo.available_timezones()
                     if ("/" in z or z == "UTC") and not z.startswith(("Etc/", "SystemV/", "US/Pacific-New"))
                     and shipped.joinpath(z).is_file())


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Network(_Model):
    """Where the nodes live and who may reach them."""

    cidr: ipaddress.IPv4Network = Field(
        default=ipaddress.IPv4Network("10.40.0.0/16"),
        description="Private (RFC 1918) VPC range, /16 to /24; the cluster subnet takes its first half.",
    )
    ssh_cidrs: tuple[ipaddress.IPv4Network, ...] = Field(
        default=(),
        description="Ranges allowed to reach port 22. Empty: no inbound SSH at all (use SSM / TAT).",
    )
    existing_subnet_id: Optional[StrictStr] = Field(
        default=None, min_length=1,
        description="Use this subnet instead of creating a VPC. The cluster then shares a subnet "
        "(\"shared vSwitch\"), which the policy pack rejects.",
    )
    egress_mbps: Optional[StrictInt] = Field(
        default=None, ge=1, le=1000,
        description="Tencent Cloud: internet egress of the NAT gateway, Mbps (1-1000; default 500), as EIPs of "
        "up to 100 Mbps each — one connection gets at most 100 Mbps. AWS NAT gateways scale by themselves: "
        "leave it out.",
    )

    flow_logs: Optional[StrictBool] = Field(
        default=None,
        description="Tencent Cloud: flow logs of the cluster's VPC (of the subnet, with existing_subnet_id) into a "
        "CLS topic. Tencent takes VPC and subnet flow logs only from accounts it has allowlisted by ticket "
        "(CreateFlowLog ResourceType), so the default is false: set true once yours is. AWS always logs the "
        "VPC's flows: leave it out.",
    )

    @field_validator("cidr", "ssh_cidrs", mode="before")
    @classmethod
    def _cidr_text(cls, v: Any) -> Any:
        """Ranges are written as text ("10.40.0.0/16"): a bare number would silently become a /32."""
        for item in (v if isinstance(v, (list, tuple)) else [v]):
            if not isinstance(item, (str, ipaddress.IPv4Network)):
                raise ValueError("must be an IPv4 range written like 10.40.0.0/16")
        return v

    @field_validator("ssh_cidrs")
    @classmethod
    def _distinct(cls, v: tuple[ipaddress.IPv4Network, ...]) -> tuple[ipaddress.IPv4Network, ...]:
        if len(set(v)) != len(v):
            raise ValueError("a range is given twice (AWS refuses a duplicate rule); give each once")
        return v

    @field_validator("cidr")
    @classmethod
    def _private_and_sized(cls, v: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if not any(v.subnet_of(p) for p in _PRIVATE_V4):
            raise ValueError("must be a private range inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16")
        if not 16 <= v.prefixlen <= 24:
            raise ValueError("prefix must be between /16 and /24 (room for the node and NAT subnets)")
        return v


class Lustre(_Model):
    """The parallel file system mounted at /lustre (FSx for Lustre PERSISTENT_2 / CFS Turbo)."""

    capacity_gib: Optional[StrictInt] = Field(
        default=None,
        gt=0,
        description="Size in GiB. AWS: 1200, 2400, then steps of 2400. Tencent: TB ≥ 40960 in steps "
        "of 20480, TP ≥ 20480 in steps of 10240. Default: the tier's size.",
    )
    throughput_per_tib: Optional[StrictInt] = Field(
        default=None,
        gt=0,
        description="MB/s per TiB. AWS: 125, 250, 500 or 1000. Tencent: 100 (Standard Turbo, TB) or "
        "200 (High-Performance Turbo, TP). Default: the tier's value.",
    )
    import_path: Optional[StrictStr] = Field(
        default=None, min_length=1,
        pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$",
        description="AWS only: s3://bucket/prefix linked to the file system by a data repository "
        "association. Default: none.",
    )


_TIER_DEFAULT = "tier default"


class Storage(_Model):
    """Disks, scratch, the parallel file system and the checkpoint bucket."""

    root_gb: Optional[StrictInt] = Field(
        default=None, ge=30, le=16384,
        description="Encrypted root volume per node, GB. Default: entry 100, mid 200, large 500.",
    )
    scratch: Optional[Scratch] = Field(
        default=None,
        description="/scratch: nvme = the shape's local NVMe (on AWS the Deep Learning AMI's own volume of "
        "them, bind-mounted; elsewhere a RAID0 made at boot); disk = a non-persistent cloud disk; none. "
        "Default: nvme when the shape has local NVMe, else none.",
    )
    data_disk_gb: StrictInt = Field(
        default=0, ge=0, le=16384,
        description="Persistent, snapshotted data disk per node, GB. 0: none.",
    )
    lustre: Optional[Lustre] = Field(
        default=None,
        description="Parallel file system. Left out: the tier's default (none on entry); null: none.",
    )
    checkpoint_bucket: StrictBool = Field(
        default=True,
        description="Create a private, versioned, encrypted checkpoint bucket (S3 / COS).",
    )


class Snapshots(_Model):
    """Backup cadence for data disks and the file system."""

    every_hours: Optional[StrictInt] = Field(
        default=None, ge=1,
        description="Snapshot interval: 1, 2, 3, 4, 6, 8, 12 or 24 hours. Default: entry 24, mid 12, large 6.",
    )
    retain: Optional[StrictInt] = Field(
        default=None, ge=1,
        description="Snapshots kept per disk (AWS DLM count) / days kept (Tencent). Default: entry 7, "
        "mid and large 14.",
    )


class Budget(_Model):
    """Monthly spend limit and who hears about it."""

    monthly_limit: Money = Field(gt=0, le=MAX_BUDGET,
                                 description=f"Monthly budget in `currency`, above 0 and at most {MAX_BUDGET:,}.")
    currency: StrictStr = Field(default="USD", description="AWS: USD. Tencent: CNY or USD (the account's).")
    thresholds_pct: tuple[StrictInt, ...] = Field(
        default=(50, 80, 100),
        min_length=1,
        description="Actual-spend alerts, % of the limit (1-1000); a forecast alert at 100 % is always added.",
    )
    emails: tuple[StrictStr, ...] = Field(
        min_length=1, description="Who receives budget and GPU alarms; at least one address."
    )
    stop_at_pct: Optional[StrictInt] = Field(
        default=None, ge=1, le=1000,
        description="Stop the GPU nodes when actual spend reaches this % of the limit (AWS Budgets action; "
        "Tencent Cloud budgets only remind: the plan says so). Default: no hard stop.",
    )

    @field_validator("thresholds_pct")
    @classmethod
    def _thresholds(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        bad = [t for t in v if not 1 <= t <= 1000]
        if bad:
            raise ValueError(f"each threshold must be 1-1000 %, got {bad}")
        if len(set(v)) != len(v):
            raise ValueError(f"thresholds must be distinct, got {list(v)}")
        return tuple(sorted(v))

    @field_validator("emails")
    @classmethod
    def _emails(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        long_ = [e[:40] + "..." for e in v if len(e) > EMAIL_MAX]
        if long_:
            raise ValueError(f"e-mail addresses are at most {EMAIL_MAX} characters, got {long_}")
        bad = [e for e in v if not _EMAIL.match(e)]
        if bad:
            raise ValueError(f"not e-mail addresses: {bad}")
        if len({e.lower() for e in v}) != len(v):
            raise ValueError("an address is given twice; give each once")
        return v


class Schedule(_Model):
    """Run windows: the GPU nodes (and the head node) run only inside them and are stopped outside."""

    timezone: StrictStr = Field(description="IANA time zone of the windows, e.g. Asia/Shanghai or Europe/Paris.")
    windows: tuple[StrictStr, ...] = Field(
        min_length=1, max_length=14,
        description='When the nodes run, e.g. "Mon-Fri 09:00-21:00", "Sat 10:00-16:00": days (Mon..Sun, one or a '
        "range) and hours, start before end; a night shift is two windows.",
    )

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, v: str) -> str:
        if v not in _time_zones():
            raise ValueError("is not an IANA time zone name (e.g. Asia/Shanghai, America/New_York, UTC)")
        return v

    @field_validator("windows")
    @classmethod
    def _windows(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        parsed = []
        for text in v:
            try:
                parsed.append(run_windows.parse(text))
            except run_windows.WindowError as e:
                raise ValueError(str(e)) from None
        clash = run_windows.overlaps(parsed)
        if clash:
            raise ValueError(f"windows overlap on {', '.join(clash)}; give each hour of a day to one window")
        if not run_windows.events(parsed):
            raise ValueError("cover the whole week, so nothing would ever stop; leave schedule out to run all the time")
        return v


class IdleStop(_Model):
    """Stop a node whose GPUs stay idle."""

    gpu_util_below_pct: Optional[StrictInt] = Field(
        default=None, ge=1, le=100,
        description="scheduler none: idle means average GPU utilisation below this % (required). scheduler slurm: "
        "not allowed — idle means no job on the node (Slurm power saving).")
    for_minutes: StrictInt = Field(ge=10, le=1440, description="For this long (10-1440, a multiple of 5).")

    @field_validator("for_minutes")
    @classmethod
    def _five(cls, v: int) -> int:
        if v % 5:
            raise ValueError("must be a multiple of 5 minutes (the alarms judge 5-minute averages)")
        return v


CapacityType = Literal["none", "odcr", "capacity_block", "prepaid"]


class Capacity(_Model):
    """Capacity bought ahead: reserved (AWS) or prepaid (Tencent Cloud) instead of pay-as-you-go."""

    type: CapacityType = Field(
        default="none",
        description="none; odcr = an AWS On-Demand Capacity Reservation for every node (in the placement group); "
        "capacity_block = an AWS EC2 Capacity Block for ML; prepaid = Tencent Cloud monthly prepaid nodes.",
    )
    start_date: Optional[datetime.date] = Field(
        default=None, description="capacity_block: the earliest day the block may start (UTC), YYYY-MM-DD.")
    duration_hours: Optional[StrictInt] = Field(
        default=None, description="capacity_block: how long the block lasts, hours (whole days: 24, 48, …).")
    reservation_id: Optional[StrictStr] = Field(
        default=None, min_length=1, description="odcr / capacity_block: use this existing reservation (cr-…) instead of making one.")
    months: Optional[StrictInt] = Field(
        default=None, description="prepaid: the term in months (1-12, 24, 36, 48 or 60). Default 1.")
    auto_renew: StrictBool = Field(default=True, description="prepaid: renew automatically when the term ends, one month at a time (Tencent renews monthly).")

    def awaiting_block(self) -> bool:
        """Whether the nodes wait for a Capacity Block this update buys (step 1). Once bought
        (reservation_id), the nodes wait for its state to be active, which only AWS knows: the AWS
        compute component reads it at deploy time."""
        return self.type == "capacity_block" and not self.reservation_id


class ClusterSpec(_Model):
    """One GPU training cluster: the whole `gpu-cluster:cluster` value of a stack file."""

    name: StrictStr = Field(
        description="Cluster name: 2-24 lower-case letters, digits and single hyphens, starting with a letter and "
        "ending with a letter or digit; prefixes every cloud resource name.",
    )
    cloud: Cloud = Field(description="aws or tencentcloud.")
    zone: StrictStr = Field(description="The one zone for every node, disk and file system; inside the provider region.")
    tier: Tier = Field(description="entry (1 × T4/A10), mid (4 × A100 NVLink), large (8 × H100-class + RDMA).")
    nodes: StrictInt = Field(default=1, ge=1, description="GPU nodes: entry and mid 1-4, large 1-64.")
    criticality: Criticality = Field(
        default="standard",
        description="critical (no spot-only, termination protection), standard, experimental.",
    )
    purchase: Purchase = Field(
        default="on_demand",
        description="on_demand, spot, or mixed (first node on-demand, the rest spot).",
    )
    instance_type: Optional[StrictStr] = Field(
        default=None, min_length=1, description="Override the tier's default shape; must fit the tier."
    )
    image_id: Optional[StrictStr] = Field(
        default=None, min_length=1,
        description="Machine image. Default: the cloud's GPU deep-learning image (AWS DLAMI via SSM; "
        "Tencent public TencentOS Server 3.1 image plus the GPU driver installer, and OpenHPC's Slurm). On Tencent "
        "an own image is taken to be Ubuntu 24.04 with the NVIDIA driver (Ubuntu's Slurm packages; not with "
        "storage.lustre and Slurm: the CFS Turbo client lists no Ubuntu after 20.04).",
    )
    network: Network = Field(default_factory=Network, description="See network.*.")
    storage: Storage = Field(default_factory=Storage, description="See storage.*.")
    snapshots: Snapshots = Field(default_factory=Snapshots, description="See snapshots.*.")
    budget: Budget = Field(description="See budget.*.")
    schedule: Optional[Schedule] = Field(default=None, description="Run windows. Default: the nodes run all the time.")
    idle_stop: Optional[IdleStop] = Field(
        default=None,
        description="Stop idle nodes. Default: on (5 % for 60 min) for experimental on-demand clusters, off otherwise "
        "(never on by default for critical ones); null: off.")
    expected_hours_a_month: Optional[float] = Field(
        default=None, gt=0, le=730,
        description="Hours a month each GPU node is expected to run (a training run and the idle time before it "
        "stops), when something stops the nodes: idle_stop, schedule or budget.stop_at_pct, on on-demand "
        "pay-as-you-go nodes. The cost estimate prices the GPU nodes for these hours instead of the whole month "
        "(or the run windows). Default: not set, the whole month or the windows.")
    capacity: Capacity = Field(default_factory=Capacity, description="See capacity.*.")
    scheduler: Scheduler = Field(
        default="slurm",
        description="slurm: a head node runs slurmctld and every GPU node slurmd (the default on both clouds; on "
        "tencentcloud's default image Slurm comes from OpenHPC, with image_id from Ubuntu 24.04); none: no scheduler. "
        "A Tencent stack deployed before Slurm was its default keeps nodes that never join: set none to keep it as "
        "it was (docs/clouds.md).")
    tags: dict[StrictStr, StrictStr] = Field(
        default_factory=dict, description="Extra tags on every taggable resource (each cloud's tag rules apply)."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.fullmatch(v):
            raise ValueError("must be 2-24 lower-case letters, digits and single hyphens, starting with a letter and "
                             "ending with a letter or digit (it becomes part of bucket and resource names)")
        if v.startswith("sthree"):
            raise ValueError("must not start with 'sthree': S3 reserves bucket names starting with 'sthree-'")
        return v

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        reserved = [k for k in v if k.lower().startswith(("aws:", "gpu-cluster:", "qcloud:", "tencent:"))
                    or k == "managed-by" or k == "Name"]
        if reserved:
            raise ValueError(f"reserved tag keys {reserved}: aws:*, qcloud:*, tencent:*, gpu-cluster:*, managed-by and "
                             f"Name are the clouds' or set by the program")
        return v


@dataclass(frozen=True)
class Cluster:
    """A validated cluster: the spec with every default filled in, its shape and its notes."""

    spec: ClusterSpec
    region: str
    shape: Shape
    notes: tuple[str, ...]
    """Facts the plan must say plainly (e.g. AWS mid → p4d.24xlarge; Tencent spot is China-site only)."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def gpus(self) -> int:
        return self.spec.nodes * self.shape.gpu_count

    @property
    def tags(self) -> dict[str, str]:
        """Tags for every taggable resource: ours, then the user's (docs/architecture.md)."""
        return {
            NAME_TAG: self.spec.name,
            "gpu-cluster:tier": self.spec.tier,
            "gpu-cluster:criticality": self.spec.criticality,
            "managed-by": "pulumi",
            **self.spec.tags,
        }


def node_is_spot(purchase: Purchase, index: int) -> bool:
    """Whether node `index` is bought as spot: `mixed` keeps node 0 on-demand (docs/architecture.md, stack file)."""
    return purchase == "spot" or (purchase == "mixed" and index > 0)


class SpecError(ValueError):
    """Every problem with a stack file, one sentence each."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid stack file:\n" + "\n".join(f"  - {p}" for p in problems))


def load_spec(cluster: Any, regions: Mapping[str, Optional[str]]) -> Cluster:
    """Validate the `gpu-cluster:cluster` value against the provider regions of the stack.

    `regions` maps each cloud to its provider region setting (`aws:region`, `tencentcloud:region`).
    """
    if not isinstance(cluster, Mapping):
        raise SpecError([f"gpu-cluster:cluster must be a mapping of settings, got {messages.kind_of(cluster)}"])
    try:
        spec = ClusterSpec.model_validate(cluster)
    except ValidationError as e:
        raise SpecError([_describe(err) for err in messages.essential(e.errors())]) from None
    return _resolve(spec, regions)


def _resolve(spec: ClusterSpec, regions: Mapping[str, Optional[str]]) -> Cluster:
    problems: list[str] = []
    cloud = spec.cloud
    profile = clouds.profile(cloud)
    region = _checked_region(cloud, profile, regions.get(cloud), problems)
    res = _resolved_tier(spec, problems)
    shape, rule = res.shape, res.rule
    notes = list(res.notes)

    problems += _zone_problems(spec, region, shape)
    problems += _size_and_id_problems(spec, rule)
    problems += _tag_problems(cloud, spec.tags)
    problems += _capacity_problems(spec, shape.type, region)
    problems += profile.network_problems(spec)

    d = rule.defaults
    scratch, lustre = _storage_choices(spec, profile, shape, d, region, problems)
    snaps = _snapshots(spec, profile, d, problems)
    problems += _budget_problems(spec, profile)
    problems += profile.storage_problems(spec, lustre)
    problems += profile.stop_problems(spec, shape)
    problems += _idle_problems(spec, profile)
    problems += _expected_hours_problems(spec)

    if problems:
        raise SpecError(problems)

    notes += _purchase_notes(spec)
    filled = _filled_spec(spec, profile, shape, d, scratch, lustre, snaps, notes)
    # What the cloud makes of this spec, said aloud.
    notes += profile.notes(filled, shape)
    return Cluster(spec=filled, region=region, shape=shape, notes=tuple(notes))


def _checked_region(cloud: Cloud, profile: clouds.CloudProfile, region: Optional[str],
                    problems: list[str]) -> str:
    """The provider region of the stack, or "" once `problems` says why it cannot be used."""
    example = profile.region_examples[0]
    if not region:
        problems.append(f"{cloud}:region is not set: set the provider region in the stack file's config "
                        f"(e.g. {cloud}:region: {example})")
        region = ""
    elif not isinstance(region, str) or region not in catalog.regions(cloud):
        problems.append(f"{cloud}:region={region!r} is not a region of {cloud}; allowed: one of "
                        f"{', '.join(catalog.regions(cloud))} (e.g. {example})")
        region = ""
    return region


def _resolved_tier(spec: ClusterSpec, problems: list[str]) -> tiers.Resolution:
    """The shape and tier rule of the spec; without one nothing else can be checked, so stop here."""
    cloud = spec.cloud
    try:
        return tiers.resolve(cloud, spec.tier, spec.instance_type)
    except tiers.TierError as e:
        field = "instance_type" if spec.instance_type else "tier"
        value = spec.instance_type or spec.tier
        problems.append(f"cluster.{field}={value!r} on {cloud}: {e}")
        raise SpecError(problems) from None


def _zone_problems(spec: ClusterSpec, region: str, shape: Shape) -> list[str]:
    """Whether the zone lies in the region and the shape is sold there (only once the region is known)."""
    problems: list[str] = []
    cloud = spec.cloud
    if region:
        pattern = catalog.limit(cloud, "zone_pattern").format(region=re.escape(region))
        if not re.fullmatch(pattern, spec.zone):
            problems.append(f"cluster.zone={spec.zone!r} is not a zone of {cloud}:region={region!r}; "
                            f"allowed: a zone named like {catalog.limit(cloud, 'zone_pattern').format(region=region)}")
        elif shape.zones and spec.zone not in shape.zones:
            problems.append(f"cluster.zone={spec.zone!r}: {shape.type} is sold only in {', '.join(shape.zones)}")
        elif shape.regions and region not in shape.regions:
            problems.append(f"{cloud}:region={region!r}: {shape.type} is sold only in {', '.join(shape.regions)}")
    return problems


def _size_and_id_problems(spec: ClusterSpec, rule: tiers.TierRule) -> list[str]:
    """The node count against the tier's limit, then the image and subnet ids against the cloud's id formats."""
    problems: list[str] = []
    cloud = spec.cloud
    if spec.nodes > rule.max_nodes:
        problems.append(f"cluster.nodes={spec.nodes} exceeds tier {spec.tier}'s limit; allowed: 1-{rule.max_nodes}")

    for field in ("image_id", "existing_subnet_id"):
        value = spec.image_id if field == "image_id" else spec.network.existing_subnet_id
        pat = _ID_PATTERNS[(cloud, field)]
        if value is not None and not re.fullmatch(pat, value):
            where = "cluster.image_id" if field == "image_id" else "cluster.network.existing_subnet_id"
            what = "an image" if field == "image_id" else "a subnet"
            problems.append(f"{where}={value!r} is not {what} id of {cloud}; allowed: ids like {pat}")
    return problems


def _storage_choices(spec: ClusterSpec, profile: clouds.CloudProfile, shape: Shape, d: tiers.TierDefaults,
                     region: str, problems: list[str]) -> tuple[str, Optional[Lustre]]:
    """The scratch kind and the Lustre file system (tier defaults filled in), checked; problems go to `problems`."""
    cloud = spec.cloud
    storage = spec.storage
    scratch = storage.scratch or ("nvme" if shape.has_nvme else "none")
    if scratch == "nvme" and not shape.has_nvme:
        problems.append(f"cluster.storage.scratch='nvme': {shape.type} has no local NVMe; allowed: disk or none")

    if "lustre" in storage.model_fields_set:
        lustre = storage.lustre
    else:
        cap = d.lustre_capacity_gib[cloud]
        lustre = Lustre(capacity_gib=cap) if cap else None
    if lustre is not None:
        lustre = Lustre(
            capacity_gib=lustre.capacity_gib or d.lustre_capacity_gib[cloud] or profile.min_lustre_gib(),
            throughput_per_tib=lustre.throughput_per_tib or d.lustre_throughput_per_tib[cloud],
            import_path=lustre.import_path,
        )
        problems += profile.lustre_problems(region, lustre)
    return scratch, lustre


def _snapshots(spec: ClusterSpec, profile: clouds.CloudProfile, d: tiers.TierDefaults,
               problems: list[str]) -> Snapshots:
    """The snapshot schedule (tier defaults filled in), checked; problems go to `problems`."""
    cloud = spec.cloud
    snaps = Snapshots(
        every_hours=d.snapshot_every_hours if spec.snapshots.every_hours is None else spec.snapshots.every_hours,
        retain=d.snapshot_retain if spec.snapshots.retain is None else spec.snapshots.retain,
    )
    intervals = catalog.limit(cloud, profile.snapshot_intervals)
    if snaps.every_hours not in intervals:
        problems.append(f"cluster.snapshots.every_hours={snaps.every_hours} is not a supported interval; "
                        f"allowed: {', '.join(map(str, intervals))}")
    problems += profile.snapshot_problems(snaps)
    return snaps


def _budget_problems(spec: ClusterSpec, profile: clouds.CloudProfile) -> list[str]:
    """The budget's currency against the cloud's, then the cloud's own budget checks."""
    problems: list[str] = []
    cloud = spec.cloud
    budget = spec.budget
    currencies = catalog.limit(cloud, "budget_currencies")
    if budget.currency not in currencies:
        problems.append(f"cluster.budget.currency={budget.currency!r} is not a budget currency of {cloud}; "
                        f"allowed: {', '.join(currencies)}")
    problems += profile.budget_problems(budget)
    return problems


def _purchase_notes(spec: ClusterSpec) -> list[str]:
    """Notes on how the nodes are bought and on a subnet the cluster shares."""
    notes: list[str] = []
    cloud = spec.cloud
    if spec.purchase != "on_demand" and not catalog.limit(cloud, "spot"):
        notes.append(f"purchase={spec.purchase} on {cloud}: spot (SPOTPAID) is sold on the China site only; "
                     f"on an international-site account `pulumi up` will fail — use purchase: on_demand there")
    if spec.purchase == "mixed" and spec.nodes == 1:
        notes.append("purchase=mixed with nodes=1: the first node is on-demand, so this cluster has no spot node")
    if spec.network.existing_subnet_id:
        notes.append(f"network.existing_subnet_id={spec.network.existing_subnet_id}: the cluster shares a subnet "
                     f"it did not create (\"shared vSwitch\"); the policy pack rejects this")
    return notes


def _filled_spec(spec: ClusterSpec, profile: clouds.CloudProfile, shape: Shape, d: tiers.TierDefaults,
                 scratch: str, lustre: Optional[Lustre], snaps: Snapshots, notes: list[str]) -> ClusterSpec:
    """The spec with every default filled in; the defaults chosen here are told in `notes`."""
    idle_stop = spec.idle_stop
    scheduler = spec.scheduler
    if ("idle_stop" not in spec.model_fields_set and spec.criticality == "experimental" and stoppable(spec)
            and profile.stopping_saves(shape)):
        if scheduler == "none":
            idle_stop = IdleStop(gpu_util_below_pct=DEFAULT_IDLE_PCT, for_minutes=DEFAULT_IDLE_MINUTES)
            notes.append(f"idle_stop: on by default for this experimental on-demand cluster (GPUs below "
                         f"{DEFAULT_IDLE_PCT} % for {DEFAULT_IDLE_MINUTES} min stop the node); idle_stop: null turns "
                         f"it off")
        elif profile.slurm_power_saving:
            idle_stop = IdleStop(for_minutes=DEFAULT_IDLE_MINUTES)
            notes.append(f"idle_stop: on by default for this experimental on-demand cluster (Slurm power saving "
                         f"stops a node that has had no job for {DEFAULT_IDLE_MINUTES} min); idle_stop: null turns "
                         f"it off")
    if "scheduler" not in spec.model_fields_set and (note := profile.default_scheduler_note()):
        notes.append(note)
    network = profile.filled_network(spec.network)
    storage = spec.storage
    return spec.model_copy(update={
        "instance_type": shape.type,
        "network": network,
        "idle_stop": idle_stop,
        "scheduler": scheduler,
        "storage": storage.model_copy(update={
            "root_gb": d.root_gb if storage.root_gb is None else storage.root_gb,
            "scratch": scratch,
            "lustre": lustre,
        }),
        "snapshots": snaps,
    })


DEFAULT_IDLE_PCT, DEFAULT_IDLE_MINUTES = 5, 60
"""Idle stop of experimental clusters when the stack file says nothing: below 5 % GPU for an hour."""
PREPAID_MONTHS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 24, 36, 48, 60)
"""Tencent Cloud prepaid terms (provider doc instance v1.82.42, instance_charge_type_prepaid_period)."""


def _idle_problems(spec: "ClusterSpec", profile: clouds.CloudProfile) -> list[str]:
    """What idle means depends on the scheduler: GPU utilisation without one, no job under Slurm."""
    idle, scheduler = spec.idle_stop, spec.scheduler
    if scheduler == "none":
        if idle is not None and idle.gpu_util_below_pct is None:
            return ["cluster.idle_stop.gpu_util_below_pct is missing: with scheduler: none a node is idle when its "
                    "GPUs average below this %; allowed: 1-100"]
        return []
    if not profile.slurm_power_saving:
        return [f"cluster.{key} with scheduler: slurm on {spec.cloud}: Slurm power saving is not built for "
                f"{spec.cloud}, and stopping nodes outside Slurm would stop them under running jobs; allowed: "
                f"scheduler: none, or leave {key} out"
                for key, on in (("schedule", spec.schedule is not None), ("idle_stop", idle is not None)) if on]
    if idle is not None and idle.gpu_util_below_pct is not None:
        return [f"cluster.idle_stop.gpu_util_below_pct={idle.gpu_util_below_pct} with scheduler: slurm: Slurm power "
                f"saving stops a node that has had no job for idle_stop.for_minutes, whatever its GPUs do (a job in "
                f"a CPU-only phase keeps its node); allowed: leave gpu_util_below_pct out, or scheduler: none"]
    return []


def _expected_hours_problems(spec: "ClusterSpec") -> list[str]:
    """Expected hours are an estimate only when something stops the nodes after them."""
    hours = spec.expected_hours_a_month
    if hours is None:
        return []
    given = f"cluster.expected_hours_a_month={hours:g}"
    if not stoppable(spec):
        return [f"{given} with purchase={spec.purchase}, capacity.type={spec.capacity.type}: only on-demand "
                f"pay-as-you-go nodes stop costing when they stop (spot nodes cannot be stopped, reserved capacity "
                f"is paid whether it runs); allowed: leave it out"]
    if spec.idle_stop is None and spec.schedule is None and spec.budget.stop_at_pct is None:
        return [f"{given}, but nothing stops the nodes after those hours, so they would run (and cost) the whole "
                f"month; allowed: together with idle_stop, schedule or budget.stop_at_pct"]
    if spec.schedule is not None:
        windows = run_windows.weekly_hours([run_windows.parse(w) for w in spec.schedule.windows]) * \
            run_windows.WEEKS_PER_MONTH
        if hours > windows + 0.5:
            return [f"{given} is more than the run windows allow ({windows:.0f} h a month); allowed: at most "
                    f"{windows:.0f}"]
    return []


EXPECTED_HOURS_TAG = "gpu-cluster:expected-hours-a-month"
"""On every GPU node instance of a stack with expected_hours_a_month: the hours the pricer counts."""


def node_cost_tags(spec: "ClusterSpec") -> dict[str, str]:
    """Tags on the GPU node instances that the pricer reads from the plan (not from the stack file)."""
    hours = spec.expected_hours_a_month
    return {EXPECTED_HOURS_TAG: f"{hours:g}"} if hours is not None else {}


def stoppable(spec: "ClusterSpec") -> bool:
    """Whether stopping the nodes saves money: on-demand nodes on pay-as-you-go capacity. One-time spot
    nodes cannot be stopped at all (EC2 stops only persistent spot requests: EC2 user guide, "Stop a Spot
    Instance"; Tencent spot instances do not stop charging: CVM documentation, "No charges when shut
    down"), and reserved or prepaid capacity is billed whether it runs or not."""
    return spec.purchase == "on_demand" and spec.capacity.type == "none"


def stop_problems(spec: "ClusterSpec", shape: Shape) -> list[str]:
    """Stopping nodes that would save nothing on the cluster's cloud (schedule, idle_stop)."""
    return clouds.profile(spec.cloud).stop_problems(spec, shape)


def _capacity_problems(spec: "ClusterSpec", shape_type: str = "", region: str = "") -> list[str]:
    """Cost controls and bought-ahead capacity, refused where they make no sense."""
    problems = []
    cloud, cap = spec.cloud, spec.capacity
    wanted = clouds.profile(cloud).capacity_types
    if cap.type not in wanted:
        problems.append(f"cluster.capacity.type={cap.type!r} does not exist on {cloud}; allowed: {', '.join(wanted)}")
        return problems
    if cap.type != "none" and spec.purchase != "on_demand":
        problems.append(f"cluster.capacity.type={cap.type!r} with purchase={spec.purchase}: reserved and prepaid "
                        f"capacity is bought for on-demand nodes; allowed: purchase: on_demand")
    block_only = bool(shape_type) and getattr(catalog.shape(cloud, shape_type), "block_only", False)
    if block_only and cap.type != "capacity_block":
        problems.append(f"cluster.instance_type={shape_type!r} with capacity.type={cap.type!r}: {shape_type} is sold "
                        f"only through EC2 Capacity Blocks (no on-demand offering in any region: the AWS Price List); "
                        f"allowed: capacity.type: capacity_block")
    given = {k for k in ("start_date", "duration_hours", "reservation_id", "months") if getattr(cap, k) is not None}
    given |= {"auto_renew"} & cap.model_fields_set
    allowed_keys = {"none": set(), "odcr": {"reservation_id"}, "capacity_block": {"start_date", "duration_hours",
                                                                                  "reservation_id"},
                    "prepaid": {"months", "auto_renew"}}[cap.type]
    for key in sorted(given - allowed_keys):
        problems.append(f"cluster.capacity.{key} is not used by capacity.type={cap.type!r}; allowed keys: "
                        f"{', '.join(sorted(allowed_keys | {'type'}))}")
    if cap.type == "capacity_block":
        problems += _block_problems(spec, shape_type, region)
    if cap.reservation_id is not None and not re.fullmatch(r"cr-[0-9a-f]{17}", cap.reservation_id):
        problems.append(f"cluster.capacity.reservation_id={cap.reservation_id!r} is not a capacity reservation id; "
                        f"allowed: ids like cr-[0-9a-f]{{17}}")
    if cap.type == "prepaid" and cap.months is not None and cap.months not in PREPAID_MONTHS:
        problems.append(f"cluster.capacity.months={cap.months} is not a prepaid term; allowed: "
                        f"{', '.join(map(str, PREPAID_MONTHS))}")
    controls = [name for name, on in (("schedule", spec.schedule is not None), ("idle_stop", spec.idle_stop is not None),
                                      ("budget.stop_at_pct", spec.budget.stop_at_pct is not None)) if on]
    for name in controls:
        if spec.purchase != "on_demand":
            problems.append(f"cluster.{name} with purchase={spec.purchase}: one-time spot nodes cannot be stopped "
                            f"(EC2 stops only persistent spot requests; Tencent spot instances keep charging when "
                            f"shut down); allowed: purchase: on_demand, or leave {name} out")
        elif cap.type != "none":
            problems.append(f"cluster.{name} with capacity.type={cap.type!r}: reserved and prepaid capacity is billed "
                            f"whether the nodes run or not, so stopping them saves nothing; allowed: capacity.type: "
                            f"none, or leave {name} out")
    return problems


def _block_problems(spec: "ClusterSpec", shape_type: str, region: str,
                    today: Optional[datetime.date] = None) -> list[str]:
    """A Capacity Block as the API sells it: shapes and regions it is offered in, lengths, instance
    counts, a start between today and the lead time (catalog limits capacity_block). With
    reservation_id the block is bought already and only its shape and count matter."""
    cap, block, problems = spec.capacity, catalog.limit("aws", "capacity_block"), []
    offered = block["offered"]
    if shape_type not in offered:
        problems.append(f"cluster.instance_type={shape_type!r} with capacity.type='capacity_block': Capacity Blocks "
                        f"are sold for {', '.join(offered)} (EC2 user guide, as of {block['offered_as_of']})")
    elif region and region not in offered[shape_type]:
        problems.append(f"aws:region={region!r} with capacity.type='capacity_block': {shape_type} blocks are sold in "
                        f"{', '.join(offered[shape_type])} (EC2 user guide, as of {block['offered_as_of']})")
    if spec.nodes not in block["instance_counts"]:
        problems.append(f"cluster.nodes={spec.nodes} with capacity.type='capacity_block': blocks are sold for "
                        f"{', '.join(map(str, block['instance_counts']))} instances")
    if cap.reservation_id is not None:
        return problems
    if cap.start_date is None or cap.duration_hours is None:
        problems.append("cluster.capacity: a capacity_block needs start_date and duration_hours to buy one, or the "
                        "reservation_id of the block once bought")
        return problems
    if not _block_duration_ok(cap.duration_hours, block):
        problems.append(f"cluster.capacity.duration_hours={cap.duration_hours} is not a Capacity Block length; "
                        f"allowed: {block['day_step_hours']}-{block['day_steps_up_to_hours']} in steps of "
                        f"{block['day_step_hours']}, then up to {block['max_hours']} in steps of "
                        f"{block['week_step_hours']}")
    today = today or datetime.datetime.now(datetime.timezone.utc).date()
    last = today + datetime.timedelta(weeks=block["lead_weeks"])
    if not today <= cap.start_date <= last:
        problems.append(f"cluster.capacity.start_date={cap.start_date.isoformat()}: a Capacity Block can start from "
                        f"today to {block['lead_weeks']} weeks ahead; allowed: {today.isoformat()} to "
                        f"{last.isoformat()} (once bought, set capacity.reservation_id instead)")
    return problems


def _block_duration_ok(hours: int, block: dict) -> bool:
    if hours <= block["day_steps_up_to_hours"]:
        return hours >= block["day_step_hours"] and hours % block["day_step_hours"] == 0
    return hours <= block["max_hours"] and hours % block["week_step_hours"] == 0


def shortest_block_hours(hours: float) -> Optional[int]:
    """The shortest Capacity Block length AWS sells that lasts at least `hours`, or None past the longest
    (catalog limits capacity_block: whole days up to 14, then whole weeks)."""
    block = catalog.limit("aws", "capacity_block")
    day, week = block["day_step_hours"], block["week_step_hours"]
    length = max(day, math.ceil(hours / day) * day)
    if length > block["day_steps_up_to_hours"]:
        length = math.ceil(hours / week) * week
    return length if length <= block["max_hours"] and _block_duration_ok(length, block) else None


OWN_TAGS_MAX = 12
"""Tags the program itself may put on one resource (gpu-cluster:name/tier/criticality, managed-by, Name,
a node's index, market, data volume and Capacity Block tags), kept free of the cloud's per-resource cap."""


def _tag_problems(cloud: Cloud, tags: Mapping[str, str]) -> list[str]:
    """Tag keys and values within the cloud's limits (catalog limits tag_*)."""
    problems = []
    room = catalog.limit(cloud, "tag_count_max") - OWN_TAGS_MAX
    if len(tags) > room:
        problems.append(f"cluster.tags has {len(tags)} tags; {cloud} allows {catalog.limit(cloud, 'tag_count_max')} "
                        f"per resource and the cluster uses up to {OWN_TAGS_MAX}: allowed: at most {room}")
    key_pat, value_pat = catalog.limit(cloud, "tag_key_pattern"), catalog.limit(cloud, "tag_value_pattern")
    key_max, value_max = catalog.limit(cloud, "tag_key_max"), catalog.limit(cloud, "tag_value_max")
    value_min = catalog.limits(cloud)["tag_value_min"].value if "tag_value_min" in catalog.limits(cloud) else 0
    for key, value in tags.items():
        if not 1 <= len(key) <= key_max or not re.fullmatch(key_pat, key) or key in (".", "..", "_index"):
            problems.append(f"cluster.tags: key {_short(key)} is not a valid tag key on {cloud}; allowed: 1-{key_max} "
                            f"characters matching {key_pat}")
        if not value_min <= len(value) <= value_max or not re.fullmatch(value_pat, value):
            problems.append(f"cluster.tags.{key}={_short(value)} is not a valid tag value on {cloud}; allowed: "
                            f"{value_min}-{value_max} characters matching {value_pat}")
    return problems


def _describe(err: Any) -> str:
    """One pydantic error as `cluster.<field>=<value>: <what is wrong; what is allowed>`, in plain words."""
    if "[key]" in err["loc"]:  # a mapping key (tags): name the mapping and the key
        mapping = ".".join(str(p) for p in err["loc"][:err["loc"].index("[key]") - 1])
        return f"cluster.{mapping}: key {_short(err.get('input'))} {messages.plain(err)}"
    loc = ".".join(str(p) for p in err["loc"])
    where = f"cluster.{loc}" if loc else "cluster"
    kind = err["type"]
    if kind == "missing":
        model = _model_at(tuple(err["loc"]))
        if model is not None:
            needed = [n for n, f in model.model_fields.items() if f.is_required()]
            return (f"{where} is required: a mapping of settings"
                    + (f" with at least {', '.join(needed)}" if needed else ""))
        return f"{where} is required: {_field_help(err['loc'])}"
    if kind == "extra_forbidden":
        allowed = _allowed_keys(err["loc"][:-1])
        return f"{where}: unknown key {err['loc'][-1]!r}; allowed keys here: {', '.join(allowed)}"
    msg = messages.plain(err)
    return f"{where}={_short(err.get('input'))}: {msg}" + _expected(err["loc"], kind)


def _short(value: Any) -> str:
    """A value as the stack file writes it (null, true, 'text'), cut at 60 characters."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_short(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k}: {_short(v)}" for k, v in value.items()) + "}"
    else:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _model_at(loc: tuple) -> Optional[type[BaseModel]]:
    model: Any = ClusterSpec
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return None
        model = _unwrap(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


def _allowed_keys(loc: tuple) -> list[str]:
    model = _model_at(loc)
    return list(model.model_fields) if model else []


def _field_help(loc: tuple) -> str:
    model = _model_at(loc[:-1])
    field = model.model_fields.get(loc[-1]) if model else None
    return (field.description or "") if field else ""


def _expected(loc: tuple, kind: str) -> str:
    """For a type error, repeat the field's documentation so the message says what is allowed."""
    if kind not in ("value_error", "extra_forbidden"):
        help_text = _field_help(tuple(p for p in loc if not isinstance(p, int)))
        return f" (allowed: {help_text})" if help_text else ""
    return ""
