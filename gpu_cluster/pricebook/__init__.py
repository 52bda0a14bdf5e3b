"""Where a price comes from: a user price file, then a fetched price cache, then the catalog.

A `PriceBook` asks its sources in that order for one item — `(cloud, item, key)` in a region, e.g.
`("aws", "instance", "p5.48xlarge")` in us-east-1 — and returns the first `Price` found, which names
its origin ("price file", "cache", "catalog"), its source and its date. No source, no price: the
pricer then lists the item as unpriced, never as zero.

Items (the vocabulary shared by the price file, the cache and the catalog):

| item | key | unit |
| --- | --- | --- |
| `instance` | instance type | hour (on-demand / pay-as-you-go) |
| `instance_spot` | instance type | hour (a spot price you pay; else the catalog's spot discount applies) |
| `capacity_block_hour` | instance type | hour of an EC2 Capacity Block, per instance (paid up front) |
| `instance_prepaid_month` | instance type | month of a Tencent Cloud prepaid instance |
| `ebs_gb_month` | volume type (`gp3`) | GB-month |
| `fsx_lustre_gb_month` | PERSISTENT_2 throughput class (`125`, `250`, `500`, `1000`) | GB-month |
| `nat_gateway_hour` | `-` on AWS; `STANDARD` or `TRADITIONAL` on Tencent Cloud | hour |
| `s3_gb_month` | `STANDARD` | GB-month (usage-billed, listed not summed) |
| `cbs_gb_month` | disk type (`CLOUD_HSSD`, `CLOUD_PREMIUM`, `LOCAL_BASIC`, ...) | GB-month |
| `cfs_turbo_gib_month` | Turbo type (`TB` Standard, `TP` High-Performance) | GiB-month |
| `cos_gb_month` | `STANDARD` | GB-month (usage-billed, listed not summed) |
| `eip_traffic_gb` | `-` | GB (usage-billed, listed not summed) |

Region matching: a price recorded for the plan's region, or for no region ("any region"), is used
as is. The catalog also answers with a price of another region, flagged as an estimate; the price
file and the cache never do (a cache fetched for us-east-1 says nothing about us-west-2).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Protocol, Sequence

ITEMS: dict[str, str] = {
    "instance": "hour",
    "instance_spot": "hour",
    "capacity_block_hour": "hour",
    "instance_prepaid_month": "month",
    "ebs_gb_month": "GB-month",
    "fsx_lustre_gb_month": "GB-month",
    "nat_gateway_hour": "hour",
    "s3_gb_month": "GB-month",
    "cbs_gb_month": "GB-month",
    "cfs_turbo_gib_month": "GiB-month",
    "cos_gb_month": "GB-month",
    "eip_traffic_gb": "GB",
}
"""Every item a price can be given for, with its unit."""

NO_KEY = "-"
"""The key of items that have no variants (a NAT gateway hour)."""

CURRENCIES = ("USD", "CNY")

ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_CACHE = ROOT / "prices" / "cache.json"
"""Where `gpu-cluster prices fetch` writes and the pricer reads the committed price cache."""


@dataclass(frozen=True)
class Price:
    """One unit price and where it came from."""

    value: float
    currency: str
    unit: str
    origin: str
    """"price file", "cache" or "catalog"."""
    source: str
    """The citation: a file and entry, an API call, a page."""
    as_of: str
    """ISO date the price was read, fetched or agreed."""
    region: Optional[str] = None
    """The region it was quoted for; None = any region."""
    estimate: bool = False
    note: str = ""

    @property
    def label(self) -> str:
        """E.g. "price file examples/prices.example.yaml (2026-12-01)"."""
        return f"{self.origin}: {self.source} ({self.as_of})"


@dataclass(frozen=True)
class Rate:
    """An exchange rate: 1 USD = `usd_cny` CNY, with its source and date."""

    usd_cny: float
    source: str
    as_of: str

    def convert(self, value: float, src: str, dst: str) -> float:
        if src == dst:
            return value
        if (src, dst) == ("USD", "CNY"):
            return value * self.usd_cny
        if (src, dst) == ("CNY", "USD"):
            return value / self.usd_cny
        raise ValueError(f"no exchange rate from {src} to {dst}")

    @property
    def label(self) -> str:
        return f"1 USD = {self.usd_cny:g} CNY ({self.source}, {self.as_of})"


@dataclass(frozen=True)
class Discount:
    """A negotiated percentage off the prices of lower-precedence sources (e.g. an EDP)."""

    cloud: str
    items: tuple[str, ...]
    """Items it applies to; ("*",) = every item."""
    percent: float
    source: str
    as_of: str

    def applies(self, cloud: str, item: str) -> bool:
        return cloud == self.cloud and ("*" in self.items or item in self.items)


class PriceSource(Protocol):
    origin: str

    def lookup(self, cloud: str, item: str, key: str, region: Optional[str]) -> Optional[Price]: ...

    def describe(self) -> str: ...


@dataclass
class PriceBook:
    """Price sources in precedence order, the negotiated discounts and the exchange rate."""

    sources: Sequence[PriceSource]
    rate: Rate
    discounts: tuple[Discount, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def lookup(self, cloud: str, item: str, key: str, region: Optional[str]) -> Optional[Price]:
        for source in self.sources:
            price = source.lookup(cloud, item, key, region)
            if price is None:
                continue
            if price.origin != "price file":
                for d in self.discounts:
                    if d.applies(cloud, item):
                        price = replace(
                            price, value=round(price.value * (1 - d.percent / 100), 8),
                            note="; ".join(filter(None, [price.note, f"{d.percent:g} % negotiated discount "
                                                                      f"({d.source}, {d.as_of})"]))
                        )
            return price
        return None

    def not_sold(self, cloud: str, key: str, region: Optional[str]) -> Optional[str]:
        """Why a source knows `key` is not sold on demand in `region` (a fetch's answer), or None."""
        for source in self.sources:
            why = getattr(source, "not_sold", lambda *_: None)(cloud, key, region)
            if why:
                return why
        return None

    def describe(self) -> list[str]:
        """One line per source, in precedence order, then discounts and the exchange rate."""
        lines = [s.describe() for s in self.sources]
        lines += [f"discount: {d.percent:g} % off {d.cloud} {', '.join(d.items)} ({d.source}, {d.as_of})"
                  for d in self.discounts]
        lines.append(f"exchange rate: {self.rate.label}")
        return lines


def today() -> str:
    return datetime.date.today().isoformat()


def load_book(price_file: Optional[Path] = None, cache: Optional[Path] = DEFAULT_CACHE,
              usd_cny: Optional[float] = None) -> PriceBook:
    """The price book: `price_file` (if given), `cache` (if the file exists), then the catalog.

    `cache=None` leaves the cache out; the default reads the committed `prices/cache.json` when there
    is one. `usd_cny` overrides every other exchange rate (the `--usd-cny` option).
    """
    from gpu_cluster.pricebook.cache import PriceCache
    from gpu_cluster.pricebook.catalog import CatalogPrices
    from gpu_cluster.pricebook.pricefile import PriceFile

    sources: list[PriceSource] = []
    discounts: tuple[Discount, ...] = ()
    catalog = CatalogPrices()
    rate = catalog.rate
    if price_file is not None:
        pf = PriceFile.load(Path(price_file))
        sources.append(pf)
        discounts = pf.discounts
        rate = pf.rate or rate
    if cache is not None and Path(cache).is_file():
        sources.append(PriceCache.load(Path(cache)))
    sources.append(catalog)
    if usd_cny is not None:
        rate = Rate(usd_cny=usd_cny, source="--usd-cny", as_of=today())
    return PriceBook(sources=sources, rate=rate, discounts=discounts)


def catalog_book() -> PriceBook:
    """Public catalog prices only: no price file, no cache."""
    return load_book(None, cache=None)
