"""The dated price cache `gpu-cluster prices fetch` writes (prices/cache.json) and the pricer reads.

One JSON document, committed by the user so that every later plan, check and review stays offline:

```json
{"gpu_cluster_price_cache": 1,
 "updated_at": "2026-12-01T10:00:00+00:00",
 "items": [{"cloud": "aws", "item": "instance", "key": "p5.48xlarge", "region": "us-east-1",
            "price": 55.04, "currency": "USD", "unit": "hour",
            "source": "AWS Price List API GetProducts AmazonEC2 sku ... (publication 2026-11-20)",
            "fetched_at": "2026-12-01T10:00:00+00:00"}]}
```

Each item names its own source (the API call and, where the API gives one, its SKU or request id)
and the time it was fetched; a later fetch replaces items of the same cloud, item, key and region.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Literal, Optional, Sequence

from pydantic import Field, ValidationError

from gpu_cluster.errors import UserError
from gpu_cluster import files
from gpu_cluster.files import load_json
from gpu_cluster.pricebook import CURRENCIES, ITEMS, Price
from gpu_cluster.pricebook.validation import Number, Strict, problems

FORMAT = 1


class CacheItem(Strict):
    cloud: Literal["aws", "tencentcloud"] = Field(description="aws or tencentcloud")
    item: Literal[tuple(ITEMS)] = Field(description=", ".join(ITEMS))  # type: ignore[valid-type]
    key: str = Field(min_length=1, description="instance type, disk type, throughput class or '-'")
    region: str = Field(min_length=1, description="the region the price was fetched for")
    price: Number = Field(ge=0, description="unit price")
    currency: Literal[CURRENCIES] = Field(description="USD or CNY")  # type: ignore[valid-type]
    unit: str = Field(min_length=1, description="the item's unit")
    source: str = Field(min_length=1, description="the API call the price came from")
    fetched_at: datetime.datetime = Field(description="ISO time of the fetch")
    note: str = Field(default="", description="free text")


class NotSold(Strict):
    """A shape the price source had no on-demand offering of in a region, when it was asked."""

    cloud: Literal["aws", "tencentcloud"] = Field(description="aws or tencentcloud")
    key: str = Field(min_length=1, description="instance type")
    region: str = Field(min_length=1, description="the region asked")
    source: str = Field(min_length=1, description="the API call that answered with no offering")
    fetched_at: datetime.datetime = Field(description="ISO time of the fetch")


class CacheDoc(Strict):
    gpu_cluster_price_cache: Literal[1] = Field(description="the cache format version, 1")
    updated_at: datetime.datetime = Field(description="ISO time of the last fetch")
    items: tuple[CacheItem, ...] = Field(default=(), description="cloud, item, key, region, price, ...")
    not_sold: tuple[NotSold, ...] = Field(default=(), description="instance types with no on-demand offering in "
                                                                 "a region at fetch time: cloud, key, region, source")


class PriceCache:
    origin = "cache"

    def __init__(self, path: Path, doc: CacheDoc):
        self.path = path
        self.doc = doc
        self._items = {(i.cloud, i.item, i.key, i.region): i for i in doc.items}
        self._not_sold = {(n.cloud, n.key, n.region): n for n in doc.not_sold}

    @classmethod
    def load(cls, path: Path) -> "PriceCache":
        raw = load_json(path, "price cache")
        try:
            doc = CacheDoc.model_validate(raw)
        except ValidationError as e:
            raise UserError(f"price cache {path}: " + "; ".join(p.lstrip(".") for p in problems(CacheDoc, "", e))
                            + " — rewrite it with `gpu-cluster prices fetch`") from None
        return cls(Path(path), doc)

    @classmethod
    def empty(cls, path: Path) -> "PriceCache":
        return cls(Path(path), CacheDoc(gpu_cluster_price_cache=1, updated_at=_now(), items=()))

    def describe(self) -> str:
        return f"cache: {self.path} (updated {self.doc.updated_at.isoformat(timespec='seconds')}, {len(self.doc.items)} prices)"

    def lookup(self, cloud: str, item: str, key: str, region: Optional[str]) -> Optional[Price]:
        found = self._items.get((cloud, item, key, region)) if region else None
        if found is None:
            return None
        return Price(value=found.price, currency=found.currency, unit=found.unit, origin=self.origin,
                     source=f"{self.path}: {found.source}", as_of=found.fetched_at.date().isoformat(),
                     region=found.region, note=found.note)

    def not_sold(self, cloud: str, key: str, region: Optional[str]) -> Optional[str]:
        """Why `key` is known not to be sold on demand in `region` (the fetch that found no offering), or None."""
        found = self._not_sold.get((cloud, key, region)) if region else None
        return None if found is None else (f"{found.source} found no on-demand offering in {region} "
                                           f"({found.fetched_at.date().isoformat()}, {self.path})")

    def merged(self, new: list[CacheItem], not_sold: Sequence[NotSold] = ()) -> "PriceCache":
        """This cache with a later fetch's prices and answers: each replaces what it says again."""
        items = dict(self._items)
        for i in new:
            items[(i.cloud, i.item, i.key, i.region)] = i
        priced = {(i.cloud, i.item, i.key, i.region) for i in new}
        unsold = {k: v for k, v in self._not_sold.items() if (k[0], "instance", k[1], k[2]) not in priced}
        for n in not_sold:
            unsold[(n.cloud, n.key, n.region)] = n
            items.pop((n.cloud, "instance", n.key, n.region), None)
        ordered = tuple(sorted(items.values(), key=lambda i: (i.cloud, i.region, i.item, i.key)))
        return PriceCache(self.path, CacheDoc(gpu_cluster_price_cache=1, updated_at=_now(), items=ordered,
                                              not_sold=tuple(sorted(unsold.values(),
                                                                    key=lambda n: (n.cloud, n.region, n.key)))))

    def write(self) -> None:
        doc = json.loads(self.doc.model_dump_json())
        files.write_text(self.path, json.dumps(doc, indent=1, ensure_ascii=False) + "\n", "price cache")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
