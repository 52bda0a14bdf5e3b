"""`gpu-cluster catalog`: the tiers, every catalogued shape, where it is sold and what it costs.

Each shape lists its GPUs, GPU memory, interconnect, RDMA/EFA interfaces and local NVMe, the regions
and zones the catalog records for it, and its hourly price with the source and the date it was read
(`unpriced` when no source gives one). Filters narrow the list; `--json` prints the same data for
scripts.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Optional

from gpu_cluster import ui
from gpu_cluster.errors import EXIT_OK, UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("catalog", help="list tiers, shapes, regions/zones and prices with their sources",
                       description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("--cloud", choices=("aws", "tencentcloud"), help="only this cloud")
    p.add_argument("--tier", choices=("entry", "mid", "large"), help="only shapes of this tier")
    p.add_argument("--region", metavar="REGION", help="only shapes sold in this region")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run)


def unit_price(shape: Any, region: Optional[str], book: Any = None) -> dict[str, Any]:
    """A shape's on-demand hourly price in `region` (default: the region its catalog price is for, else the
    cloud's price region) as `plan` prices a node of it: the same price book (price file → cache →
    catalog) and the same Pricer.unit, in the currency of the cloud's totals. A shape sold only in Capacity
    Blocks: its block's effective hourly rate, as `plan` prices a block of it."""
    from components import catalog
    from gpu_cluster.bills import bill_of
    from gpu_cluster.pricebook import load_book
    from gpu_cluster.pricing import Pricer

    region = region or shape.price_region or catalog.prices(shape.cloud).get("region")
    bill = bill_of(shape.cloud)
    value, meta = Pricer(book if book is not None else load_book(), shape.cloud, bill.currency, region).unit(
        "capacity_block_hour" if shape.block_only else "instance", shape.type)
    return {"hourly": value, "currency": bill.currency, "region": region, "source": [meta.get("source", "")],
            "origin": meta.get("origin", ""), "as_of": meta.get("as_of", ""), "estimate": bool(meta.get("estimate")),
            "note": meta.get("note", "")}


def shape_row(shape: Any, tiers_of: list[str], region: Optional[str] = None, book: Any = None) -> dict[str, Any]:
    from components import catalog

    return {
        "cloud": shape.cloud, "type": shape.type, "tiers": tiers_of,
        "gpus": shape.gpu_count, "gpu": shape.gpu, "gpu_mem_gib": shape.gpu_mem_gib,
        "vcpu": shape.vcpu, "mem_gib": shape.mem_gib, "interconnect": shape.interconnect,
        "rdma_interfaces": shape.rdma_interfaces, "rdma": shape.rdma, "hpc_cluster": shape.hpc,
        "nvme": {"count": shape.nvme_count, "gb_each": shape.nvme_gb},
        "network_gbps": shape.network_gbps,
        "regions": list(shape.regions) or list(catalog.sold_regions(shape)),
        "capacity_blocks_only": shape.block_only,
        "zones": list(shape.zones),
        "price": unit_price(shape, region, book),
        "unconfirmed": list(shape.unconfirmed),
        "note": shape.note,
    }


def collect(cloud: Optional[str], tier: Optional[str], region: Optional[str]) -> dict[str, Any]:
    from components import catalog, tiers

    if region is not None:
        clouds = [c for c in catalog.CLOUDS if region in catalog.regions(c)]
        if not clouds:
            raise UserError(f"--region {region!r} is not a region of aws or tencentcloud; e.g. us-east-1, ap-shanghai")
        if cloud is not None and cloud not in clouds:
            raise UserError(f"--region {region!r} is not a {cloud} region")
    chosen = [c for c in catalog.CLOUDS if c == cloud or cloud is None]
    from gpu_cluster.pricebook import load_book

    book = load_book()
    out_tiers = []
    for name in tiers.TIERS:
        if tier is not None and name != tier:
            continue
        rule = tiers.RULES[name]
        out_tiers.append({
            "tier": name, "summary": rule.summary, "max_nodes": rule.max_nodes,
            "default_shape": {c: rule.default_shape[c] for c in chosen},
            "shapes": {c: tiers.allowed_types(c, name) for c in chosen},
        })
    shapes = []
    for c in chosen:
        for shape in catalog.shapes(c).values():
            member = [t for t in tiers.TIERS if tiers.fits(c, t, shape)]
            if tier is not None and tier not in member:
                continue
            if region is not None and not catalog.sold_in(shape, region):
                continue
            shapes.append(shape_row(shape, member, region, book))
    return {"tiers": out_tiers, "shapes": shapes}


def _where(row: dict) -> str:
    if row["zones"]:
        return ", ".join(row["zones"])
    where = ", ".join(row["regions"]) if row["regions"] else "not recorded"
    return f"Capacity Blocks only: {where}" if row.get("capacity_blocks_only") else where


def _price(row: dict) -> str:
    p = row["price"]
    if p["hourly"] is None:
        return "unpriced"
    where = f" ({p['region']})" if p["region"] else ""
    return f"{p['hourly']:,.4g} {p['currency']}/h{where}" + (" est." if p["estimate"] else "")


def run(args: argparse.Namespace) -> int:
    data = collect(args.cloud, args.tier, args.region)
    if args.json:
        ui.out.print_json(json.dumps(data))
        return EXIT_OK
    ui.table(["tier", "per node", "nodes", "default shape", "shapes"],
             [[t["tier"], t["summary"], f"1-{t['max_nodes']}",
               "; ".join(f"{c}: {s}" for c, s in t["default_shape"].items()),
               "; ".join(f"{c}: {', '.join(s) or '—'}" for c, s in t["shapes"].items())] for t in data["tiers"]],
             title="tiers")
    ui.table(["cloud", "type", "tiers", "GPUs", "GPU mem", "interconnect", "RDMA/EFA", "NVMe", "sold in", "price",
              "priced from (as of)"],
             [[r["cloud"], r["type"], ", ".join(r["tiers"]) or "—", f"{r['gpus']}×{r['gpu']}", f"{r['gpu_mem_gib']} GiB",
               r["interconnect"], _rdma(r), _nvme(r), _where(r), _price(r),
               f"{r['price']['origin'] or '—'} ({r['price']['as_of'] or 'no price'})"]
              for r in data["shapes"]],
             title="shapes", right=("GPUs", "GPU mem"))
    unconfirmed = [r for r in data["shapes"] if r["unconfirmed"]]
    for r in unconfirmed:
        ui.line(f"{r['type']}: not confirmed by a primary source: {', '.join(r['unconfirmed'])}")
    return EXIT_OK


def _rdma(r: dict) -> str:
    from components.clouds import profile

    name = profile(r["cloud"]).rdma_name
    if r["rdma_interfaces"]:
        return f"{r['rdma_interfaces']} {name}"
    return f"{name} (count unpublished)" if r["rdma"] else "—"


def _nvme(r: dict) -> str:
    n = r["nvme"]
    return f"{n['count']}×{n['gb_each']} GB" if n["count"] else "—"
