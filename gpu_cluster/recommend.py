"""From a workload to a cluster: which cloud, tier, shape, node count and purchase option, at what cost.

The model (every constant below is stated in the output and in docs/recommend.md):

- **Memory** (does the model fit?). Training state in bytes per parameter, sharded evenly over every
  GPU of the cluster (ZeRO-3 / FSDP), plus the activations of one sample of `sequence_length` tokens
  per GPU (not sharded; `ACTIVATION_BYTES`, `activation_gib`: all of them, or with activation
  checkpointing each layer's input and one layer's), must fit in `USABLE_MEMORY` of each GPU's memory;
  the rest is left for the CUDA context, communication buffers and fragmentation.
  full and pretrain: 16 bytes/param — mixed-precision Adam keeps fp16/bf16 weights (2) and gradients
  (2) plus fp32 master weights, momentum and variance (4 + 4 + 4): "16Ψ bytes" in Rajbhandari et al.,
  ZeRO: Memory Optimizations Toward Training Trillion Parameter Models (arXiv:1910.02054, §3.1).
  lora: 2 bytes/param of frozen bf16 weights plus adapters trained with Adam at 16 bytes per adapter
  parameter, taken as 1 % of the model (Hu et al., LoRA, arXiv:2106.09685: GPT-3 175B training VRAM
  1.2 TB → 350 GB, i.e. ≈ 2 bytes/param): 2.16 bytes/param.
- **Time**. Training FLOPs per parameter and token by method (`FLOPS_PER_PARAM_TOKEN`): full and pretrain 6
  (forward 2N, backward twice that: Kaplan et al., Scaling Laws for Neural Language Models, arXiv:2001.08361,
  §2.1, C ≈ 6NBS); lora 4 — the backward pass still computes the activations' gradients through the frozen
  weights (2N) but not the frozen weights' own gradients (2N), and the adapters (taken as 1 % of the model
  above) add a negligible 1 %. Hours = FLOPs / (GPUs × peak dense BF16 (FP16 on T4) TFLOPS from
  components/catalog/gpus.yaml × the GPU's measured `mfu` there, else `MFU`) / 3600, a third more (a half for
  LoRA) where activations are recomputed. `MFU` = 40 %: Llama 3 405B pre-training reports
  38-43 % BF16 model-FLOPs utilisation on 8-16 K H100s (Llama Team, The Llama 3 Herd of Models,
  arXiv:2407.21783, Table 4). Scaling across nodes is taken as linear at that utilisation.
- **Tokens** from a dataset size: `BYTES_PER_TOKEN` = 4 (≈ 4 characters of English text per BPE token,
  one byte per character in UTF-8: OpenAI's tokenizer guidance, help.openai.com "What are tokens and
  how to count them?"); tokens × epochs.
- **Cost**. Each candidate is priced by the project's pricer on the resources its stack creates (GPU
  nodes, root and data disks, the parallel file system, NAT), from the same price book as `plan`
  (price file → cache → catalog). Monthly cost = the plan's total for the stack `--write-stack` would
  write: where something stops the nodes after the training (on-demand nodes under Slurm with an idle
  stop, on either cloud), the stack states `expected_hours_a_month` (the training and the idle hour after it)
  and the nodes are priced for those hours; otherwise (spot nodes cannot be stopped; a Tencent shape with
  local NVMe keeps charging when stopped) for the whole month. Run cost = node-hours × training hours + the month's fixed items
  prorated over the run. Costs in another currency than the
  budget's are converted at the book's dated exchange rate, named in the output.
- **Purchase options**. On demand always; spot where the catalog or the price book has a spot price and
  the workload is not critical; on AWS an EC2 Capacity Block for ML where the shape is sold in blocks,
  placed in a region that sells them (catalog limits `capacity_block`; among the workload's `regions`
  when it names some), which AWS recommends for training "for days
  or weeks at a time" (EC2 user guide, "Capacity Blocks for ML"). A block is paid up front for its
  whole length, whatever runs: the candidate takes the node count AWS sells (1, 2, 4, 8, …) and the
  shortest block that lasts the estimated training hours plus `BLOCK_OVERHEAD_HOURS`, and pays for every
  hour of it in the month it is bought, however long the block. The output states the hours to spare.
- **Ranking** (rank()). Candidates that fit memory, time and budget first, by the cost of the whole run, then
  its hours (`--sort time`: hours, then cost), fewer nodes first on a tie; never by tier. Then the near
  misses, each with what keeps it out.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from components import catalog, tiers
from components.catalog import Shape
from gpu_cluster.pricebook import PriceBook
from components.run_windows import HOURS_PER_MONTH
from gpu_cluster.workload import Workload

BYTES_PER_PARAM = {"full": 16.0, "pretrain": 16.0, "lora": 2.16}
USABLE_MEMORY = 0.80
MFU = 0.40
"""The utilisation assumed where gpus.yaml has no published measurement for the GPU (its `mfu`)."""
ACTIVATION_BYTES = 34
"""Activations a transformer layer keeps per token and hidden unit in 16-bit training, with FlashAttention
(no s² attention scores): 34·s·b·h bytes (Korthikanti et al., Reducing Activation Recomputation in Large
Transformer Models, arXiv:2205.05198, §4.1, eq. 1 less its 5·a·s/h attention term, which FlashAttention,
arXiv:2205.14135, never stores). With full recomputation a layer keeps only its input, 2·s·b·h bytes, and one
layer's activations exist at a time (§4.2); the recomputation is one more forward pass, 2 FLOPs per
parameter and token."""
WIDTH_PER_LAYER = 128
"""Model shape from its size: N ≈ 12·L·h² (Kaplan et al., arXiv:2001.08361, §2.1) with h = 128·L, LLaMA's
ratio (Touvron et al., arXiv:2302.13971, Table 2: 7B 4096/32, 13B 5120/40, 65B 8192/80)."""
BYTES_PER_TOKEN = 4.0
FLOPS_PER_PARAM_TOKEN = {"full": 6, "pretrain": 6, "lora": 4}
BLOCK_OVERHEAD_HOURS = 1.5
"""What a Capacity Block must hold beyond the training: EC2 begins terminating its instances 30 minutes
before it ends (EC2 user guide, "Monitor Capacity Blocks using EventBridge": the warning comes "forty
minutes before", termination "in 10 minutes"), and an hour for the nodes' first boot (drivers, the
Lustre client, possibly one reboot) once the block starts."""
GIB = 2 ** 30
DEFAULT_REGION = {"aws": "us-east-1", "tencentcloud": "ap-shanghai"}
"""Where candidates are placed unless the workload lists regions: AWS's catalog price region; Tencent's
HCC/CFS Turbo region of the samples (shapes with recorded zones use their first recorded region)."""


def gpus_catalog() -> dict[str, dict]:
    return catalog.read("gpus.yaml")


def model_shape(params: float) -> tuple[int, int]:
    """(hidden size, layers) of a dense transformer of `params` parameters (WIDTH_PER_LAYER)."""
    hidden = (WIDTH_PER_LAYER * params / 12) ** (1 / 3)
    return round(hidden), max(1, round(hidden / WIDTH_PER_LAYER))


def activation_gib(w: Workload, checkpointing: bool) -> float:
    """Activation memory per GPU for one sample of `w.sequence_length` tokens (micro-batch 1): every layer's
    activations, or with checkpointing every layer's input plus one layer's activations (ACTIVATION_BYTES).
    Not sharded: each GPU holds its own micro-batch's."""
    hidden, layers = model_shape(w.model_params)
    per_layer = ACTIVATION_BYTES * w.sequence_length * hidden
    total = 2 * w.sequence_length * hidden * layers + per_layer if checkpointing else per_layer * layers
    return total / GIB


def mfu_of(gpu: dict) -> tuple[float, str]:
    """(utilisation, where it comes from) for a GPU row of gpus.yaml."""
    if gpu.get("mfu") is not None:
        return float(gpu["mfu"]), str(gpu.get("mfu_source", ""))
    return MFU, "assumed: no published measurement for this GPU"


@dataclass
class Candidate:
    cloud: str
    tier: str
    shape: Shape
    region: str
    zone: str
    nodes: int
    purchase: str
    gpus: int
    need_gib: float
    have_gib: float
    hours: float
    cost_currency: str
    node_month: Optional[float]
    fixed_month: float
    run_cost: Optional[float] = None
    monthly_cost: Optional[float] = None
    within_budget: Optional[bool] = None
    meets_time: bool = True
    unpriced: list[str] = field(default_factory=list)
    why: str = ""
    storage: dict = field(default_factory=dict)
    block_hours: Optional[int] = None
    """capacity_block: the length of the block bought, hours (paid in full)."""
    estimated_price: str = ""
    """When the node price is an estimate (another region's, an unconfirmed copy): the price's date."""
    items: list[dict] = field(default_factory=list)
    """The priced items of the stack it would write, as `plan` prices them (LineItem fields)."""
    rank_reason: str = ""
    """Why the row is where it is (rank())."""
    checkpointing: bool = False
    """Whether the run recomputes activations (activation checkpointing) on this candidate."""
    cost_currency_shown: str = ""
    """The currency run_cost and monthly_cost are in (the recommendation's)."""

    @property
    def fits_memory(self) -> bool:
        return self.need_gib <= self.have_gib

    @property
    def billed_cost(self) -> Optional[float]:
        """What the run is billed, the cost ranking compares: a run within a month (or a Capacity Block) is
        billed the month it is in, the monthly cost quoted; a longer one its whole cost, month after month."""
        if self.block_hours or self.hours <= HOURS_PER_MONTH:
            return self.monthly_cost
        return self.run_cost

    @property
    def feasible(self) -> bool:
        return self.fits_memory and self.meets_time and self.within_budget is True

    def failures(self) -> list[str]:
        out = []
        if not self.fits_memory:
            out.append("memory")
        if not self.meets_time:
            out.append("time")
        if self.within_budget is not True and self.fits_memory:
            out.append("budget" if self.within_budget is False else "price")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "tier": self.tier, "shape": self.shape.type, "gpu": self.shape.gpu_label,
                "region": self.region, "zone": self.zone, "nodes": self.nodes, "gpus": self.gpus,
                "purchase": self.purchase, "fits_memory": self.fits_memory,
                "memory_gib_per_gpu": {"needed": round(self.need_gib, 2), "usable": round(self.have_gib, 2)},
                "hours": round(self.hours, 1), "meets_time": self.meets_time,
                "run_cost": None if self.run_cost is None else round(self.run_cost, 2),
                "monthly_cost": None if self.monthly_cost is None else round(self.monthly_cost, 2),
                "block_hours": self.block_hours, "node_price_estimate_as_of": self.estimated_price or None,
                "within_budget": self.within_budget, "unpriced": self.unpriced, "why": self.why,
                "rank_reason": self.rank_reason, "checkpointing": self.checkpointing,
                "failed": self.failures(), "items": self.items}


@dataclass
class Recommendation:
    workload: Workload
    tokens: float
    flops: float
    candidates: list[Candidate]
    rate: Any
    currency: str
    sources: list[str]
    assumptions: dict[str, Any]

    @property
    def top(self) -> Optional[Candidate]:
        return self.candidates[0] if self.candidates and self.candidates[0].feasible else None

    def what_would_fit(self) -> list[str]:
        """When nothing fits: which constraint failed, and what would change that."""
        w, cur = self.workload, self.currency
        out = []
        mem = [c for c in self.candidates if c.fits_memory]
        if not mem:
            biggest = max(self.candidates, key=lambda c: c.have_gib * c.gpus, default=None)
            need = BYTES_PER_PARAM[w.method] * w.model_params / GIB
            out.append(f"memory: no candidate holds {need:,.0f} GiB of training state"
                       + (f" (the largest, {biggest.nodes} × {biggest.shape.type}, has "
                          f"{biggest.have_gib * biggest.gpus:,.0f} GiB usable)" if biggest else "")
                       + ("; try method: lora, a smaller model or multi_node: true" if w.method != "lora"
                          or not w.multi_node else ""))
            return out
        timed = [c for c in mem if c.meets_time]
        if not timed:
            fastest = min(mem, key=lambda c: c.hours)
            out.append(f"time: the fastest candidate that fits memory, {fastest.nodes} × {fastest.shape.type} "
                       f"({fastest.cloud} {fastest.tier}), needs {fastest.hours:,.0f} h > target_hours "
                       f"{w.target_hours:g}; a target of {math.ceil(fastest.hours):,} h would fit")
        priced_timed = [c for c in timed if c.within_budget is not None]
        if timed and not priced_timed:
            out.append("price: every candidate that meets memory and time lacks a price ("
                       + ", ".join(sorted({c.shape.type for c in timed})) + "); give them in a price file "
                       "(--prices) or fetch them (`gpu-cluster prices fetch`)")
        if priced_timed and not any(c.within_budget for c in priced_timed):
            cheapest = min(priced_timed, key=lambda c: c.monthly_cost or math.inf)
            out.append(f"budget: the cheapest candidate that meets memory and time, {cheapest.nodes} × "
                       f"{cheapest.shape.type} ({cheapest.cloud} {cheapest.tier}, {cheapest.hours:,.0f} h), costs "
                       f"{cheapest.monthly_cost:,.0f} {cur} a month > {w.budget.monthly_limit:,.0f} {cur}; a budget of "
                       f"{math.ceil(cheapest.monthly_cost):,} {cur} would fit, or fewer tokens / epochs "
                       f"(≈ {w.budget.monthly_limit / cheapest.monthly_cost:.0%} of the training)")
            in_budget = [c for c in mem if c.within_budget]
            if in_budget and w.target_hours:
                slow = min(in_budget, key=lambda c: c.hours)
                out.append(f"time: within budget, the fastest is {slow.nodes} × {slow.shape.type} at "
                           f"{slow.hours:,.0f} h (target_hours {w.target_hours:g})")
        unpriced_timed = [c for c in timed if c.within_budget is None]
        if unpriced_timed and priced_timed:
            out.append("unpriced: " + ", ".join(sorted({c.shape.type for c in unpriced_timed})) + " would meet "
                       "memory and time but have no price; a price file or cache entry lets them be judged")
        return out

    def as_dict(self) -> dict[str, Any]:
        w = self.workload
        return {
            "workload": w.model_dump(mode="json"),
            "training": {"tokens": self.tokens, "flops": self.flops},
            "assumptions": self.assumptions,
            "exchange_rate": self.rate.label,
            "currency": self.currency,
            "price_sources": self.sources,
            "recommendation": self.top.as_dict() if self.top else None,
            "what_would_fit": [] if self.top else self.what_would_fit(),
            "candidates": [c.as_dict() for c in self.candidates],
        }


def training_tokens(w: Workload) -> float:
    per_epoch = w.tokens if w.tokens is not None else w.dataset_gb * 1e9 / BYTES_PER_TOKEN
    return per_epoch * w.epochs


def _placement(cloud: str, shape: Shape, allowed: Optional[tuple[str, ...]], lustre: bool,
               within: Optional[tuple[str, ...]] = None, book: Optional[PriceBook] = None) -> Optional[tuple[str, str]]:
    """(region, zone) for a shape, or None when it is not sold in an allowed region; `within` narrows
    the regions to those where a purchase option is sold (a Capacity Block's regions). A region where a
    `prices fetch` found no on-demand offering of the shape (the book's `not_sold`) is never chosen for it
    on demand."""
    from components.clouds import profile

    if book is not None and within is None:
        asked = allowed or catalog.sold_regions(shape) or (DEFAULT_REGION[cloud],)
        offered = tuple(r for r in asked if not book.not_sold(cloud, shape.type, r))
        if offered != asked:
            if not offered:
                return None
            allowed = offered
    sold = catalog.sold_regions(shape)
    lustre_regions = profile(cloud).lustre_regions() if lustre else None
    if lustre_regions is not None:
        sold = tuple(r for r in sold if r in lustre_regions) if sold else lustre_regions
    if within is not None:
        sold = tuple(r for r in (sold or within) if r in within)
        if not sold:
            return None
    if allowed:
        regions = [r for r in allowed if not sold or r in sold]
    elif sold:
        regions = [DEFAULT_REGION[cloud]] if DEFAULT_REGION[cloud] in sold else [sold[0]]
    else:
        regions = [DEFAULT_REGION[cloud]]
    if not regions:
        return None
    region = regions[0]
    zones = [z for z in shape.zones if catalog.region_of_zone(cloud, z) == region]
    zone = zones[0] if zones else profile(cloud).default_zone(region)
    return region, zone


def _valid_lustre(cloud: str, tier: str, want_gib: float) -> Optional[dict]:
    """The tier's file system, grown to the next valid size that holds `want_gib`."""
    d = tiers.RULES[tier].defaults
    cap = d.lustre_capacity_gib[cloud]
    if not cap:
        return None
    from components.clouds import profile

    tput = d.lustre_throughput_per_tib[cloud]
    size = profile(cloud).lustre_size_at_least(cap, tput, want_gib)
    return {"capacity_gib": int(size), "throughput_per_tib": int(tput)}


def _storage(w: Workload, cloud: str, tier: str) -> dict:
    d = tiers.RULES[tier].defaults
    data_gb = (w.dataset_gb or 0) * 2  # the dataset plus room for checkpoints and shuffled copies
    lustre = _valid_lustre(cloud, tier, data_gb)
    disk = 0 if lustre else max(100, int(math.ceil(data_gb / 100.0)) * 100)
    return {"root_gb": d.root_gb, "data_disk_gb": disk, "lustre": lustre}


_PRICED: dict[str, Any] = {}
"""Priced renders by stack document, for this process: the same candidate is rendered once."""


def priced_render(w: Workload, c: "Candidate", book: PriceBook, rate: Any) -> Any:
    """The monthly cost of the stack `c` would be written as, priced from what `plan` renders of it: the
    same program under the offline engine, the same bill and price book. One model of the cluster: the
    recommendation's items are the plan's items."""
    import json as _json

    from gpu_cluster.plan import Plan
    from gpu_cluster.pricing import price_plan
    from gpu_cluster.render import StackFile, render

    doc = candidate_document(w, rate, c, (PRICING_EMAIL,), priced_only=True)
    key = _json.dumps(doc, sort_keys=True) + "|" + repr(book.describe())
    if key not in _PRICED:
        config = doc["config"]
        stack_file = StackFile(stack=w.name, path=Path(f"(recommended {c.cloud} {c.shape.type})"), config=config)
        _PRICED[key] = price_plan(Plan.from_doc(render(stack_file).plan()), book)
    return _PRICED[key]


PRICING_EMAIL = "budget-alerts@example.com"
"""The budget address of the document a candidate is priced from (no price depends on it); the stack
file `--write-stack` writes carries the addresses given to it."""


def _block_regions(cloud: str, shape: Shape) -> tuple[str, ...]:
    """The regions that sell `shape` in capacity blocks (the cloud's profile)."""
    from components.clouds import profile

    return profile(cloud).capacity_block_regions(shape)


def _purchases(w: Workload, cloud: str, shape: Shape, book: PriceBook) -> list[str]:
    from gpu_cluster.pricebook.catalog import spot_discount

    out = [] if shape.block_only else ["on_demand"]
    if _block_regions(cloud, shape):
        out.append("capacity_block")
    if w.criticality == "critical" or not catalog.limit(cloud, "spot"):
        return out
    if spot_discount(cloud, shape.type) or book.lookup(cloud, "instance_spot", shape.type, None):
        out.append("spot")
    return out


def _block_pick(lo: int, hi: int, fits: Any, hours: Any, target: Optional[float]) -> Optional[tuple[int, int]]:
    """(nodes, block hours) of the cheapest Capacity Block that meets memory and time: a node count AWS
    sells, the shortest block that lasts the training and BLOCK_OVERHEAD_HOURS; fewer nodes on a tie.
    None when no block does."""
    from components.spec import shortest_block_hours

    picks = []
    for n in catalog.limit("aws", "capacity_block")["instance_counts"]:
        if lo <= n <= hi and fits(n) and (target is None or hours(n) <= target):
            length = shortest_block_hours(hours(n) + BLOCK_OVERHEAD_HOURS)
            if length is not None:
                picks.append((n * length, n, length))
    return min(picks)[1:] if picks else None


def _cost(c: "Candidate", cost: Any, rate: Any, currency: str, limit: float) -> None:
    """A candidate's run and monthly cost from its plan's priced items. GPU node lines are what runs: on
    demand they are priced for the hours the written stack expects (expected_hours), else the month (730 h);
    a Capacity Block's lines are the whole block, paid in the month it is bought. Everything else is fixed for
    the month. The monthly cost is the plan's total: `plan` of the written stack says the same."""
    c.items = [asdict(i) for i in cost.items]
    c.cost_currency = cost.currency
    nodes_lines = [i for i in cost.items if i.item.startswith("GPU node")]
    c.node_month = None if any(i.monthly is None for i in nodes_lines) else sum(i.monthly for i in nodes_lines)
    c.fixed_month = sum(i.monthly for i in cost.items if i.monthly is not None and i not in nodes_lines)
    c.unpriced = [i.item for i in cost.unpriced]
    c.estimated_price = next((i.as_of or "undated" for i in nodes_lines if i.estimate), "")
    if c.node_month is None:
        return
    if c.block_hours:
        run = c.node_month + c.fixed_month * min(c.block_hours, HOURS_PER_MONTH) / HOURS_PER_MONTH
        month = c.node_month + c.fixed_month
    else:
        # The plan priced the nodes for the hours the written stack expects (the training and the idle stop
        # after it), or for the whole month where nothing stops them: the monthly cost is the plan's.
        hourly = c.node_month / (expected_hours(c) or HOURS_PER_MONTH)
        run = hourly * c.hours + c.fixed_month * min(c.hours, HOURS_PER_MONTH) / HOURS_PER_MONTH
        month = c.node_month + c.fixed_month
    c.run_cost = rate.convert(run, cost.currency, currency)
    c.cost_currency_shown = currency
    c.monthly_cost = rate.convert(month, cost.currency, currency)
    c.within_budget = c.monthly_cost <= limit


SORTS = ("cost", "time")
"""How feasible candidates are ordered: cost (the default: the cheapest run that meets the target, then the
fastest) or time (the fastest, then the cheapest)."""


def rank(candidates: list["Candidate"], sort: str = "cost") -> None:
    """Orders `candidates` in place and says why each row is where it is (Candidate.rank_reason).

    Feasible ones first (they fit in memory, meet the target hours and are priced within the budget), by what
    the run is billed (`Candidate.billed_cost`: the monthly cost quoted, which `plan` of the written stack says,
    for a run within a month; the whole run's cost for a longer one) and then its hours (sort cost), or the
    reverse (sort time); equal ones favour
    fewer, larger nodes (less to go wrong across nodes). Then the near misses, each said why it is out: memory is
    the hardest constraint to change, then time, then budget, then a missing price."""
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")

    def cost(c: "Candidate") -> float:
        return c.billed_cost if c.billed_cost is not None else math.inf

    def key(c: "Candidate") -> tuple:
        first, second = (cost(c), c.hours) if sort == "cost" else (c.hours, cost(c))
        return (not c.feasible, not c.fits_memory, not c.meets_time, c.within_budget is None,
                c.within_budget is False, first, second, c.nodes)

    candidates.sort(key=key)
    best = next((c for c in candidates if c.feasible), None)
    for i, c in enumerate(candidates):
        if not c.feasible:
            c.rank_reason = "out: " + ", ".join(c.failures())
        elif c is best:
            c.rank_reason = ("the lowest cost that meets the workload" if sort == "cost"
                             else "the fastest run that meets the workload")
        else:
            more = cost(c) - cost(best)
            slower = c.hours - best.hours
            parts = []
            if abs(more) >= 0.5:
                parts.append(f"{abs(more):,.0f} {c.cost_currency_shown} {'more' if more > 0 else 'less'}")
            if abs(slower) >= 0.5:
                parts.append(f"{abs(slower):,.0f} h {'slower' if slower > 0 else 'faster'}")
            c.rank_reason = f"than #1: {', '.join(parts) or 'the same cost and time, more nodes'}"


def recommend(w: Workload, book: PriceBook, sort: str = "cost") -> Recommendation:
    # Over 60 lines on purpose: the model's steps (memory, time, purchase, placement, price, verdict) read in
    # the order docs/recommend.md states them, one candidate at a time; split up, the closures over the
    # shape's figures (need, hours) would travel through every helper.
    gpus_yaml = gpus_catalog()
    # activation GiB per GPU by checkpointing: False keeps every activation, True recomputes them
    activations = {checkpointed: activation_gib(w, checkpointed) for checkpointed in (False, True)}
    tokens = training_tokens(w)
    flops = FLOPS_PER_PARAM_TOKEN[w.method] * w.model_params * tokens
    currency = w.budget.currency
    rate = book.rate
    candidates: list[Candidate] = []
    for cloud in w.clouds:
        for tier in tiers.TIERS:
            rule = tiers.RULES[tier]
            lo, hi = (2, rule.max_nodes) if w.multi_node else (1, 1)
            if lo > hi:
                continue
            storage = _storage(w, cloud, tier)
            for itype in tiers.allowed_types(cloud, tier):  # type: ignore[arg-type]
                shape = catalog.shape(cloud, itype)  # type: ignore[arg-type]
                gpu = gpus_yaml.get(shape.gpu)
                if gpu is None:
                    continue
                place = _placement(cloud, shape, w.regions_of(cloud), bool(storage["lustre"]), book=book)
                if place is None:
                    continue
                per_gpu_tflops = float(gpu["peak_dense_tflops"]) * 1e12 * mfu_of(gpu)[0]
                have = shape.gpu_mem_gib * USABLE_MEMORY

                def state(n: int) -> float:
                    return BYTES_PER_PARAM[w.method] * w.model_params / (n * shape.gpu_count) / GIB

                def checkpointing(n: int) -> bool:
                    """Whether the run recomputes activations at n nodes: as the workload says, or (auto) only
                    where keeping them all would not fit."""
                    if w.activation_checkpointing != "auto":
                        return w.activation_checkpointing == "on"
                    return state(n) + activations[False] > have

                def need(n: int) -> float:
                    return state(n) + activations[checkpointing(n)]

                def hours(n: int) -> float:
                    k = FLOPS_PER_PARAM_TOKEN[w.method]
                    recompute = (k + 2) / k if checkpointing(n) else 1.0  # one more forward pass
                    return flops * recompute / (n * shape.gpu_count * per_gpu_tflops) / 3600

                ok = [n for n in range(lo, hi + 1) if need(n) <= have and
                      (w.target_hours is None or hours(n) <= w.target_hours)]
                fits = [n for n in range(lo, hi + 1) if need(n) <= have]
                n = ok[0] if ok else (hi if not fits or w.target_hours else fits[0])
                for purchase in _purchases(w, cloud, shape, book):
                    nodes, block, region, zone = n, None, *place
                    if purchase == "capacity_block":
                        # Blocks are sold in fewer regions than the shape: the block goes where it is sold.
                        block_place = _placement(cloud, shape, w.regions_of(cloud), bool(storage["lustre"]),
                                                 within=_block_regions(cloud, shape))
                        pick = _block_pick(lo, hi, lambda k: need(k) <= have, hours, w.target_hours)
                        if block_place is None or pick is None:
                            continue
                        (region, zone), (nodes, block) = block_place, pick
                    c = Candidate(cloud=cloud, tier=tier, shape=shape, region=region, zone=zone, nodes=nodes,
                                  purchase=purchase, gpus=nodes * shape.gpu_count, need_gib=need(nodes),
                                  checkpointing=checkpointing(nodes),
                                  have_gib=have, hours=hours(nodes), cost_currency="", node_month=None,
                                  fixed_month=0.0, storage=storage, block_hours=block,
                                  meets_time=w.target_hours is None or hours(nodes) <= w.target_hours)
                    if c.fits_memory:  # a cluster that cannot hold the model has no cost worth rendering
                        _cost(c, priced_render(w, c, book, rate), rate, currency, w.budget.monthly_limit)
                    c.why = _why(c, w, currency, gpu)
                    candidates.append(c)
    rank(candidates, sort)
    return Recommendation(
        workload=w, tokens=tokens, flops=flops, candidates=candidates, rate=rate, currency=currency,
        sources=book.describe(),
        assumptions={"bytes_per_param": BYTES_PER_PARAM[w.method], "usable_gpu_memory": USABLE_MEMORY, "mfu": MFU,
                     "mfu_by_gpu": {g: {"mfu": mfu_of(row)[0], "source": mfu_of(row)[1]}
                                    for g, row in gpus_yaml.items()},
                     "model_shape": dict(zip(("hidden", "layers"), model_shape(w.model_params))),
                     "sequence_length": w.sequence_length,
                     "activation_gib_per_gpu": {"all_kept": round(activations[False], 2),
                                                "checkpointed": round(activations[True], 2)},
                     "flops_per_param_token": FLOPS_PER_PARAM_TOKEN[w.method],
                     "bytes_per_token": BYTES_PER_TOKEN if w.tokens is None else None,
                     "hours_per_month": HOURS_PER_MONTH})


def _why(c: Candidate, w: Workload, cur: str, gpu: dict) -> str:
    mem = (f"{c.need_gib:,.1f} of {c.have_gib:,.1f} GiB per GPU over {c.gpus} GPU(s)"
           + (", activations recomputed" if c.checkpointing else ""))
    if not c.fits_memory:
        return (f"does not fit: needs {c.need_gib:,.1f} GiB per GPU (training state and activations"
                + (", recomputed" if c.checkpointing else "") + f"), {c.have_gib:,.1f} usable even at {c.nodes} node(s)")
    if not c.meets_time:
        return (f"too slow: {c.hours:,.0f} h > target {w.target_hours:g} h at {c.nodes} node(s) "
                f"({gpu['peak_dense_tflops']:g} TFLOPS {gpu['precision']} × {mfu_of(gpu)[0]:.0%}"
                + (", activations recomputed" if c.checkpointing else "") + ")")
    if c.within_budget is None:
        return f"fits ({mem}, {c.hours:,.0f} h) but has no price: " + ", ".join(sorted(set(c.unpriced)))
    if not c.within_budget:
        return f"over budget: {c.monthly_cost:,.0f} {cur}/month > {w.budget.monthly_limit:,.0f}"
    extra = f"; excludes unpriced {', '.join(sorted(set(c.unpriced)))}" if c.unpriced else ""
    if c.block_hours:
        extra += (f"; a {c.block_hours}-h Capacity Block, paid in full when bought, "
                  f"{c.block_hours - c.hours - BLOCK_OVERHEAD_HOURS:,.1f} h to spare beyond the training, "
                  f"{BLOCK_OVERHEAD_HOURS:g} h for boot and EC2's early stop")
    if c.estimated_price:
        extra += f"; the node price is an estimate (as of {c.estimated_price})"
    return (f"fits ({mem}), {c.hours:,.0f} h"
            + (f" ≤ {w.target_hours:g}" if w.target_hours else "")
            + f", {c.monthly_cost:,.0f} ≤ {w.budget.monthly_limit:,.0f} {cur}/month{extra}")


BLOCK_START_DAYS = 7
"""A written Capacity Block starts a week after the recommendation: time to review the pull request
before `pulumi up` buys it (it cannot be cancelled); the stack file says to change it."""


IDLE_AFTER_RUN_MINUTES = 60
"""The written stack's idle stop where Slurm powers the nodes: a node with no job for an hour is stopped."""


def expected_hours(c: Candidate) -> Optional[float]:
    """The hours a month the written stack expects its nodes to run (expected_hours_a_month): the training and
    the idle stop after it, where something stops them then; None where nothing does (they run the month)."""
    if not stops_after_the_run(c):
        return None
    return float(min(HOURS_PER_MONTH, math.ceil(c.hours + IDLE_AFTER_RUN_MINUTES / 60)))


def stops_after_the_run(c: Candidate) -> bool:
    """Whether the written stack stops the nodes once the training has ended: on demand, for less than a month,
    on a cloud where Slurm, which the written stack gets by default, starts and stops the nodes, and on a shape
    that stops costing when stopped (Tencent keeps charging a stopped instance with local disks)."""
    from components.clouds import profile

    p = profile(c.cloud)
    return (c.purchase == "on_demand" and c.hours < HOURS_PER_MONTH and p.slurm_power_saving
            and p.stopping_saves(c.shape))


def stack_document(rec: Recommendation, c: Candidate, emails: tuple[str, ...],
                   today: Optional[datetime.date] = None) -> dict[str, Any]:
    """The top pick as a stack file's document (validated with load_spec before it is returned)."""
    return candidate_document(rec.workload, rec.rate, c, emails, today)


def candidate_document(w: Workload, rate: Any, c: Candidate, emails: tuple[str, ...],
                       today: Optional[datetime.date] = None, priced_only: bool = False) -> dict[str, Any]:
    """A candidate as a stack file's document: what --write-stack writes and what it is priced from.
    `priced_only`: a document only priced, never written, whose budget may be capped at the stack file's
    largest (no price depends on the budget; a written one says the budget is too large instead)."""
    from components.spec import MAX_BUDGET, load_spec

    limit = w.budget.monthly_limit
    currency = w.budget.currency
    allowed = catalog.limit(c.cloud, "budget_currencies")  # type: ignore[arg-type]
    if currency not in allowed:
        limit, currency = rate.convert(limit, currency, allowed[0]), allowed[0]
    if priced_only:
        limit = min(limit, MAX_BUDGET)
    storage: dict[str, Any] = {"root_gb": c.storage["root_gb"], "data_disk_gb": c.storage["data_disk_gb"],
                               "lustre": c.storage["lustre"], "checkpoint_bucket": True}
    cluster: dict[str, Any] = {
        "name": w.name, "cloud": c.cloud, "zone": c.zone, "tier": c.tier, "nodes": c.nodes,
        "criticality": w.criticality, "purchase": c.purchase, "instance_type": c.shape.type,
    }
    if c.purchase == "capacity_block":
        # Step one of two: `pulumi up` buys the block; the nodes launch once it starts (docs/clouds.md, Capacity Blocks).
        start = (today or datetime.datetime.now(datetime.timezone.utc).date()) + datetime.timedelta(days=BLOCK_START_DAYS)
        cluster["purchase"] = "on_demand"
        cluster["capacity"] = {"type": "capacity_block", "start_date": start.isoformat(),
                               "duration_hours": c.block_hours}
    if stops_after_the_run(c):
        cluster["idle_stop"] = {"for_minutes": IDLE_AFTER_RUN_MINUTES}
        cluster["expected_hours_a_month"] = expected_hours(c)
    cluster.update({
        "storage": storage,
        "budget": {"monthly_limit": round(limit, 2), "currency": currency, "emails": list(emails)},
        "tags": {"workload": w.name},
    })
    load_spec(cluster, {c.cloud: c.region})
    return {"config": {f"{c.cloud}:region": c.region, "gpu-cluster:cluster": cluster}}
