"""`gpu-cluster recommend WORKLOAD.yaml`: rank candidate clusters for a training workload, and write the best as a stack.

For each allowed cloud, tier and shape: whether the model fits in GPU memory, the training hours,
the run's cost and the monthly cost, whether that is within budget, and why (the model: see
gpu_cluster/recommend.py and docs/recommend.md). `--write-stack PATH` writes the top pick as a stack file
that `gpu-cluster plan --stack-file PATH` renders. Exit 0 with a recommendation, 1 when no candidate
fits memory, time and budget (saying which constraint failed and what would fit), 2 for a bad
workload file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpu_cluster import files, ui
from gpu_cluster.errors import EXIT_OK, EXIT_VIOLATION, UserError



def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recommend", help="rank clusters for a training workload; --write-stack writes the top pick",
                       description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("workload", metavar="WORKLOAD.yaml", help="workload file (see examples/workloads/)")
    p.add_argument("--prices", metavar="FILE", help="a price file (negotiated rates) over the cache and the catalog")
    p.add_argument("--usd-cny", type=float, metavar="RATE", help="CNY per USD for comparing currencies "
                   "(default: the workload's usd_cny, else the price file's, else the catalog's dated rate)")
    p.add_argument("--write-stack", metavar="PATH", help="write the top pick as a stack file (Pulumi.<name>.yaml)")
    p.add_argument("--email", action="append", default=[], metavar="ADDR",
                   help="budget alert address for the written stack (repeatable; required with --write-stack: "
                        "no placeholder address is ever written)")
    p.add_argument("--sort", choices=("cost", "time"), default="cost",
                   help="order of the candidates that meet the workload: cost (the cheapest run first, the default) "
                        "or time (the fastest first)")
    p.add_argument("--top", type=int, default=12, metavar="N", help="rows to show (default 12; --json has all)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def _money(value, cur: str) -> str:
    return "unpriced" if value is None else f"{value:,.0f} {cur}"


def _yaml_value(value) -> str:
    """A default as the workload file would spell it: 1, false, standard."""
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _write_stack(args: argparse.Namespace, rec, w) -> Path:
    """--write-stack: the top pick as a stack file, with a header saying what it was costed as."""
    import yaml

    from components.spec import SpecError
    from gpu_cluster.recommend import IDLE_AFTER_RUN_MINUTES, expected_hours, stack_document, stops_after_the_run

    top = rec.top
    emails = tuple(args.email)
    try:
        doc = stack_document(rec, top, emails)
    except SpecError as e:
        raise UserError("the stack file it would write is invalid: " + "; ".join(
            p.replace("cluster.budget.emails", "--email") for p in e.problems)) from None
    files.output_file(Path(args.write_stack), "--write-stack")
    path = Path(args.write_stack)
    header = (f"# Written by `gpu-cluster recommend {args.workload}` for workload {w.name}: {top.nodes} × "
              f"{top.shape.type} ({top.cloud} {top.tier}, {top.purchase}), est. {top.hours:,.0f} h of training, "
              f"{top.monthly_cost:,.0f} {rec.currency}/month in the month of the run.\n"
              f"# Exchange rate: {rec.rate.label}.\n"
              + (f"# A {top.block_hours}-h EC2 Capacity Block, step one of two: set capacity.start_date to the day it "
                 f"should start (within 8 weeks); `pulumi up` buys it, paid up front and not refundable, and "
                 f"launches no node. Then set capacity.reservation_id to the stack output capacity_reservation_id: "
                 f"the `pulumi up` after the block is active (11:30 UTC on its start day) launches the nodes. The "
                 f"block ends at its end time: checkpoint.\n"
                 if top.block_hours else "")
              + (f"# idle_stop: Slurm power saving stops each GPU node {IDLE_AFTER_RUN_MINUTES} min after its last job; "
                 f"expected_hours_a_month: {expected_hours(top):g} (the training and that hour) is what `plan` prices, "
                 f"as quoted. A longer run, or a node kept busy, costs more.\n" if stops_after_the_run(top) else ""))
    files.write_text(path, header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), "--write-stack")
    return path


def _check(args: argparse.Namespace) -> None:
    """The options, each refused in one sentence."""
    import math

    if args.usd_cny is not None and not (math.isfinite(args.usd_cny) and args.usd_cny > 0):
        raise UserError(f"--usd-cny {args.usd_cny!r}: allowed: a positive number of CNY per USD, e.g. 7.1")
    if args.top < 1:
        raise UserError(f"--top {args.top}: allowed: 1 or more")
    if args.write_stack and not args.email:
        raise UserError(f"--write-stack {args.write_stack} without --email: the stack's budget alerts need an address "
                        f"that reaches someone (a placeholder would plan clean and warn nobody); allowed: one or "
                        f"more --email ADDR")


def run(args: argparse.Namespace) -> int:
    from gpu_cluster import workload as wl
    from gpu_cluster.pricebook import load_book
    from gpu_cluster.recommend import recommend

    w = wl.load(Path(args.workload))
    _check(args)
    book = load_book(Path(args.prices) if args.prices else None,
                     usd_cny=args.usd_cny if args.usd_cny is not None else w.usd_cny)
    rec = recommend(w, book, sort=args.sort)
    top = rec.top
    written = _write_stack(args, rec, w) if top is not None and args.write_stack else None
    assumed = w.defaulted()
    if args.json:
        data = rec.as_dict()
        data["stack_file"] = str(written) if written else None
        data["defaults_assumed"] = assumed
        ui.out.print_json(json.dumps(data))
        return EXIT_OK if top else EXIT_VIOLATION
    cur = rec.currency
    ui.line(f"workload {w.name}: {w.model_params:.3g} parameters, {w.method}, {rec.tokens:.3g} training tokens "
            f"→ {rec.flops:.3g} FLOPs; budget {w.budget.monthly_limit:,.0f} {cur}/month"
            + (f", target {w.target_hours:g} h" if w.target_hours else ""))
    if assumed:
        ui.line("assumed: " + ", ".join(f"{k}={_yaml_value(v)}" for k, v in assumed.items())
                + (" (default; set " if len(assumed) == 1 else " (defaults; set ")
                + ", ".join(f"{k}:" for k in assumed) + " in the workload)")
    a = rec.assumptions
    shape, act = a["model_shape"], a["activation_gib_per_gpu"]
    measured = sorted({f"{v['mfu']:.0%}" for v in a["mfu_by_gpu"].values() if not v["source"].startswith("assumed")})
    ui.line(f"model: {a['bytes_per_param']:g} bytes/param sharded over all GPUs, plus activations of one "
            f"{a['sequence_length']}-token sample per GPU ({act['all_kept']:,.1f} GiB, {act['checkpointed']:,.1f} "
            f"recomputed; taken as {shape['layers']} layers of {shape['hidden']}), {a['usable_gpu_memory']:.0%} of GPU "
            f"memory usable; {a['flops_per_param_token']} × params × tokens FLOPs (+2 when recomputing) at the "
            f"GPU's measured utilisation ({', '.join(measured)}), {a['mfu']:.0%} where none is published; peak dense "
            f"BF16/FP16" + (f"; {a['bytes_per_token']:g} bytes/token" if a["bytes_per_token"] else "")
            + f"; exchange rate {rec.rate.label}")
    rows = []
    for i, c in enumerate(rec.candidates[:args.top], 1):
        rows.append([i, c.cloud, c.region, c.tier, c.shape.type, c.nodes, c.purchase,
                     "yes" if c.fits_memory else "no", f"{c.hours:,.0f}",
                     _money(c.run_cost, cur) if c.fits_memory else "—", _money(c.monthly_cost, cur) if c.fits_memory else "—",
                     {True: "yes", False: "no", None: "unknown" if c.fits_memory else "—"}[c.within_budget],
                     c.rank_reason, c.why])
    ui.table(["#", "cloud", "region", "tier", "shape", "nodes", "purchase", "fits memory", "hours", "run cost", "monthly cost",
              "within budget", "rank", "why"], rows, right=("#", "nodes", "hours", "run cost", "monthly cost"),
             title=f"candidates ({len(rec.candidates)}; best first by {'cost billed, then hours' if args.sort == 'cost' else 'hours, then cost billed'})")
    for line in book.describe():
        ui.line(f"prices: {line}")
    if top is None:
        ui.line("no candidate fits memory, time and budget:")
        for line in rec.what_would_fit():
            ui.line(f"  - {line}")
        return EXIT_VIOLATION
    ui.line(f"recommendation: {top.nodes} × {top.shape.type} on {top.cloud} ({top.tier}, {top.purchase}) in "
            f"{top.zone}: {top.hours:,.0f} h, run {top.run_cost:,.0f} {cur}, {top.monthly_cost:,.0f} {cur}/month")
    if written:
        ui.line(f"stack file written to {written}; render it with `gpu-cluster plan --stack-file {written}`")
    return EXIT_OK
