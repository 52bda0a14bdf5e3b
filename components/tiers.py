"""What entry, mid and large mean on each cloud (docs/architecture.md). Pure functions over the catalog.

A tier is a rule over catalogued shapes (GPU model, count, interconnect, RDMA), a default shape per
cloud, node limits and storage/snapshot defaults. Which shapes fit is derived from the catalog, so a
new catalog row joins its tier without code changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from components import catalog
from components.catalog import Cloud, Shape

Tier = Literal["entry", "mid", "large"]
TIERS: tuple[Tier, ...] = ("entry", "mid", "large")

H100_CLASS = frozenset({"H100", "H200", "H800", "H20"})
"""GPUs the large tier accepts: the H100 generation (Hopper) with its memory system and NVSwitch."""
H100_COMPUTE = frozenset({"H100", "H200", "H800"})
"""Of those, the ones with an H100's dense compute; the H20 has a small fraction of it, and a plan on
an H20 shape says so (components/tencentcloud/notes.py)."""


@dataclass(frozen=True)
class TierDefaults:
    """Sizes used when the stack file leaves a field out."""

    root_gb: int
    lustre_capacity_gib: dict[Cloud, Optional[int]]
    lustre_throughput_per_tib: dict[Cloud, int]
    snapshot_every_hours: int
    snapshot_retain: int


@dataclass(frozen=True)
class TierRule:
    name: Tier
    summary: str
    gpus: frozenset[str]
    gpu_count: int
    needs_nvlink: bool
    needs_rdma: bool
    max_nodes: int
    default_shape: dict[Cloud, str]
    defaults: TierDefaults


RULES: dict[Tier, TierRule] = {
    "entry": TierRule(
        name="entry",
        summary="1 × T4 or 1 × A10 per node",
        gpus=frozenset({"T4", "A10", "A10G"}),
        gpu_count=1,
        needs_nvlink=False,
        needs_rdma=False,
        max_nodes=4,
        default_shape={"aws": "g4dn.xlarge", "tencentcloud": "GN7.2XLARGE32"},
        defaults=TierDefaults(
            root_gb=100,
            lustre_capacity_gib={"aws": None, "tencentcloud": None},
            lustre_throughput_per_tib={"aws": 125, "tencentcloud": 100},
            snapshot_every_hours=24,
            snapshot_retain=7,
        ),
    ),
    "mid": TierRule(
        name="mid",
        summary="4 × A100 with NVLink per node",
        gpus=frozenset({"A100"}),
        gpu_count=4,
        needs_nvlink=True,
        needs_rdma=False,
        max_nodes=4,
        default_shape={"aws": "p4d.24xlarge", "tencentcloud": "GT4.20XLARGE474"},
        defaults=TierDefaults(
            root_gb=200,
            lustre_capacity_gib={"aws": 2400, "tencentcloud": 20480},
            lustre_throughput_per_tib={"aws": 250, "tencentcloud": 200},
            snapshot_every_hours=12,
            snapshot_retain=14,
        ),
    ),
    "large": TierRule(
        name="large",
        summary="8 × H100-class per node with NVSwitch and EFA/RDMA",
        gpus=H100_CLASS,
        gpu_count=8,
        needs_nvlink=True,
        needs_rdma=True,
        max_nodes=64,
        default_shape={"aws": "p5.48xlarge", "tencentcloud": "HCCPNV6.96XLARGE2304"},
        defaults=TierDefaults(
            root_gb=500,
            lustre_capacity_gib={"aws": 4800, "tencentcloud": 40960},
            lustre_throughput_per_tib={"aws": 500, "tencentcloud": 100},
            snapshot_every_hours=6,
            snapshot_retain=14,
        ),
    ),
}


class TierError(ValueError):
    """An instance type that does not belong to the tier; the message names the allowed types."""


@dataclass(frozen=True)
class Resolution:
    """The shape a (cloud, tier, override) resolves to, and what the plan must say about it."""

    cloud: Cloud
    tier: Tier
    shape: Shape
    rule: TierRule
    notes: tuple[str, ...]


def _gpu_count_wanted(rule: TierRule, cloud: Cloud) -> int:
    """The tier's GPU count, or the smallest larger count the cloud sells when it sells none.

    AWS sells no 4×A100 shape (p4d/p4de come in one size, 8 GPUs: docs.aws.amazon.com/ec2/latest/instancetypes/ac.html), so the mid
    tier on AWS resolves to 8×A100 — and says so in the plan.
    """
    counts = sorted(
        s.gpu_count
        for s in catalog.shapes(cloud).values()
        if s.gpu in rule.gpus and _interconnect_ok(rule, s)
    )
    if rule.gpu_count in counts or not counts:
        return rule.gpu_count
    larger = [c for c in counts if c > rule.gpu_count]
    return larger[0] if larger else rule.gpu_count


def _interconnect_ok(rule: TierRule, shape: Shape) -> bool:
    if rule.needs_nvlink and shape.interconnect == "pcie":
        return False
    return not (rule.needs_rdma and not shape.rdma)


def fits(cloud: Cloud, tier: Tier, shape: Shape) -> bool:
    rule = RULES[tier]
    return (
        catalog.shapes(cloud).get(shape.type) is shape
        and shape.gpu in rule.gpus
        and shape.gpu_count == _gpu_count_wanted(rule, cloud)
        and _interconnect_ok(rule, shape)
    )


def allowed_types(cloud: Cloud, tier: Tier) -> list[str]:
    """Every catalogued instance type of `cloud` that belongs to `tier`."""
    return [t for t, s in catalog.shapes(cloud).items() if fits(cloud, tier, s)]


def resolve(cloud: Cloud, tier: Tier, instance_type: Optional[str] = None) -> Resolution:
    """Resolve a tier to a catalogued shape; raise `TierError` naming the allowed types."""
    rule = RULES[tier]
    chosen = instance_type or rule.default_shape[cloud]
    shape = catalog.shape(cloud, chosen)
    allowed = ", ".join(allowed_types(cloud, tier))
    if shape is None:
        raise TierError(
            f"{chosen!r} is not a catalogued {cloud} GPU shape; tier {tier} on {cloud} allows: {allowed}"
        )
    if not fits(cloud, tier, shape):
        raise TierError(
            f"{chosen!r} has {shape.gpu_label} ({shape.interconnect}"
            f"{', RDMA' if shape.rdma else ''}), which does not fit tier {tier} ({rule.summary}); "
            f"tier {tier} on {cloud} allows: {allowed}"
        )
    notes = []
    wanted = _gpu_count_wanted(rule, cloud)
    if wanted != rule.gpu_count:
        others = [c for c in catalog.CLOUDS if c != cloud]
        alt = ", ".join(f"cloud={c} with {RULES[tier].default_shape[c]}" for c in others)
        notes.append(
            f"tier {tier} on {cloud}: {cloud} sells no {rule.gpu_count}×{'/'.join(sorted(rule.gpus))} "
            f"shape, so each node is {shape.type} ({shape.gpu_label}, {shape.interconnect}) — "
            f"{wanted // rule.gpu_count}× the GPUs and price of the tier; for exactly "
            f"{rule.gpu_count} GPUs use {alt}"
        )
    if shape.unconfirmed:
        notes.append(
            f"{shape.type}: catalog values not confirmed by a primary source: "
            f"{', '.join(shape.unconfirmed)}"
        )
    return Resolution(cloud=cloud, tier=tier, shape=shape, rule=rule, notes=tuple(notes))
