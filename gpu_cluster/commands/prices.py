"""`gpu-cluster prices`: fetch exact prices from the clouds' APIs into a dated cache, or show what prices a stack.

`gpu-cluster prices fetch --cloud aws --region us-east-1` asks the AWS Price List API (credentials
from the default chain); `gpu-cluster prices fetch --cloud tencentcloud --region ap-shanghai --zone
ap-shanghai-5 --image-id img-...` asks Tencent's inquiry APIs (TENCENTCLOUD_SECRET_ID / _KEY). Both
merge into prices/cache.json (or --out): commit it, and every later plan, check and review prices
offline from it. `gpu-cluster prices show` lists the effective price of every catalogued item with
the source and date that priced it (a price file first, then the cache, then the catalog).
Exit 0 when every item was fetched or shown, 1 when some items could not be fetched (the rest are
written), 2 for bad input or missing credentials.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

from gpu_cluster import ui
from gpu_cluster.errors import EXIT_OK, EXIT_VIOLATION, UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prices", help="fetch API prices into the committed price cache, or show effective prices",
                       description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    f = actions.add_parser("fetch", help="ask the cloud's price APIs and merge the answers into the cache")
    f.add_argument("--cloud", required=True, choices=("aws", "tencentcloud"))
    f.add_argument("--region", required=True, metavar="REGION", help="e.g. us-east-1 or ap-shanghai")
    f.add_argument("--zone", metavar="ZONE", help="tencentcloud: the zone instances are quoted in (e.g. ap-shanghai-5)")
    f.add_argument("--image-id", metavar="ID", help="tencentcloud: an image id for the instance inquiry (img-...)")
    f.add_argument("--currency", choices=("CNY", "USD"), default="CNY",
                   help="tencentcloud: the account's billing currency (China site CNY, international USD); default CNY")
    f.add_argument("--out", metavar="FILE", help="cache file (default: prices/cache.json)")
    f.set_defaults(run=run)
    s = actions.add_parser("show", help="the effective price of each catalogued item and who priced it")
    s.add_argument("--cloud", choices=("aws", "tencentcloud"), help="only this cloud")
    s.add_argument("--region", metavar="REGION", help="price for this region (default: each cloud's catalog region)")
    s.add_argument("--prices", metavar="FILE", help="a price file, over the cache and the catalog")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(run=run)


def _check_region(cloud: str, region: str) -> None:
    from components import catalog

    from components.clouds import profile

    if region not in catalog.regions(cloud):  # type: ignore[arg-type]
        raise UserError(f"--region {region!r} is not a {cloud} region; e.g. {profile(cloud).region_examples[0]}")


def fetch(args: argparse.Namespace) -> int:
    from components import catalog
    from gpu_cluster.pricebook import DEFAULT_CACHE
    from gpu_cluster.pricebook.cache import PriceCache

    _check_region(args.cloud, args.region)
    out = Path(args.out) if args.out else DEFAULT_CACHE
    cache = PriceCache.load(out) if out.is_file() else PriceCache.empty(out)
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    from components.headnode import HEAD_INSTANCE_TYPES

    types = list(catalog.shapes(args.cloud)) + [HEAD_INSTANCE_TYPES[args.cloud]]  # the GPU shapes, the Slurm head's
    not_sold: list = []
    items, problems = {"aws": _fetch_aws, "tencentcloud": _fetch_tencent}[args.cloud](args, types, now, not_sold)
    cache = cache.merged(items, not_sold)
    cache.write()
    ui.table(["item", "key", "price", "unit", "source"],
             [[i.item, i.key, f"{i.price:,.6g} {i.currency}", i.unit, i.source] for i in items],
             title=f"{args.cloud} {args.region}: {len(items)} price(s) fetched {now.isoformat()}")
    for p in problems:
        ui.warn(p)
    for n in not_sold:
        ui.line(f"not sold on demand: {n.key} in {n.region} (no offering in the answer; the recommender will not "
                f"place it there)")
    ui.line(f"price cache written to {out} ({len(cache.doc.items)} prices); commit it so plans stay offline")
    hard = [p for p in problems if "no inquiry API" not in p]
    return EXIT_VIOLATION if hard else EXIT_OK


def _fetch_aws(args: argparse.Namespace, types: list[str], now: datetime.datetime,
               not_sold: list) -> tuple[list, list[str]]:
    from gpu_cluster.pricebook import fetch_aws

    ui.note(f"asking the AWS Price List API for {len(types)} instance types and 4 storage/network items in "
            f"{args.region}")
    return fetch_aws.fetch(fetch_aws.client(), args.region, types, now, not_sold)


def _fetch_tencent(args: argparse.Namespace, types: list[str], now: datetime.datetime,
                   not_sold: list) -> tuple[list, list[str]]:
    from components import catalog
    from gpu_cluster.pricebook import fetch_tencent

    if not args.zone or catalog.region_of_zone("tencentcloud", args.zone) != args.region:
        raise UserError(f"--zone {args.zone!r}: give a zone of --region {args.region} (e.g. {args.region}-5); "
                        f"Tencent quotes instance prices per zone")
    if not args.image_id or not args.image_id.startswith("img-"):
        raise UserError(f"--image-id {args.image_id!r}: give the id of an image in {args.zone} (img-xxxxxxxx); "
                        f"InquiryPriceRunInstances requires one (a free public image does not change the price)")
    ui.note(f"asking Tencent's inquiry APIs for {len(types)} instance types in {args.zone} and CBS/EIP in "
            f"{args.region} (billing currency {args.currency})")
    return fetch_tencent.fetch(fetch_tencent.clients(args.region), args.region, args.zone, args.image_id,
                               args.currency, types, now)


def show(args: argparse.Namespace) -> int:
    from components import catalog
    from gpu_cluster.pricebook import NO_KEY, load_book
    from gpu_cluster.pricebook.catalog import entry

    book = load_book(Path(args.prices) if args.prices else None)
    rows = []
    for cloud in [c for c in catalog.CLOUDS if c == args.cloud or not args.cloud]:
        region = args.region or catalog.prices(cloud).get("region")
        if args.region:
            _check_region(cloud, args.region)
        keys = [("instance", t) for t in catalog.shapes(cloud)]
        for item in ("ebs_gb_month", "fsx_lustre_gb_month", "s3_gb_month", "cbs_gb_month", "cfs_turbo_gib_month",
                     "cos_gb_month", "nat_gateway_hour", "eip_traffic_gb"):
            row = catalog.prices(cloud).get(item)
            if isinstance(row, dict):
                keys += [(item, NO_KEY)] if "price" in row else [(item, str(k)) for k in row]
        for item, key in keys:
            if item != "instance" and entry(cloud, item, key) is None:
                continue
            price = book.lookup(cloud, item, key, region)
            rows.append({"cloud": cloud, "region": region, "item": item, "key": key,
                         "price": price.value if price else None, "currency": price.currency if price else None,
                         "unit": price.unit if price else None, "origin": price.origin if price else None,
                         "source": price.source if price else None, "as_of": price.as_of if price else None,
                         "estimate": price.estimate if price else None, "note": price.note if price else ""})
    if args.json:
        ui.out.print_json(json.dumps({"sources": book.describe(), "prices": rows}))
        return EXIT_OK
    ui.table(["cloud", "region", "item", "key", "price", "origin (as of)", "source"],
             [[r["cloud"], r["region"] or "any", r["item"], r["key"],
               "unpriced" if r["price"] is None else f"{r['price']:,.6g} {r['currency']}/{r['unit']}"
               + (" (estimate)" if r["estimate"] else ""),
               f"{r['origin']} ({r['as_of']})" if r["origin"] else "—", r["source"] or "no source"] for r in rows],
             title="effective prices")
    for line in book.describe():
        ui.line(f"source: {line}")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    return fetch(args) if args.action == "fetch" else show(args)
