"""The user price file: negotiated rates, discounts and private offers, highest precedence.

```yaml
price_file:
  name: ACME negotiated rates        # shown beside every line it prices
  as_of: 2026-12-01                  # when the rates were agreed or read
  source: "AWS EDP 2026 + Tencent framework agreement"
  exchange_rate: {usd_cny: 7.2, source: "finance, Dec 2026", as_of: 2026-12-01}   # optional
  discounts:                         # % off every lower-precedence price of these items
    - {cloud: aws, items: ["*"], percent: 12, source: "EDP"}
  prices:
    - {cloud: aws, item: instance, key: p5.48xlarge, price: 39.5, currency: USD}          # any region
    - {cloud: tencentcloud, item: instance, key: GT4.20XLARGE474, region: ap-shanghai, price: 120, currency: CNY}
```

Items and keys are those of `gpu_cluster.pricebook.ITEMS`. A price without `region` applies in every
region. Give it with `--prices FILE` (plan) or the stack config key `gpu-cluster:prices` (a path
relative to the stack file).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, ValidationError, field_validator, model_validator

from components import catalog
from components.messages import kind_of
from gpu_cluster.errors import UserError
from gpu_cluster.files import load_yaml
from gpu_cluster.pricebook import CURRENCIES, ITEMS, NO_KEY, Discount, Price, Rate
from gpu_cluster.pricebook.validation import Number, Strict, problems

CloudName = Literal["aws", "tencentcloud"]
Item = Literal[tuple(ITEMS)]  # type: ignore[valid-type]
Currency = Literal[CURRENCIES]  # type: ignore[valid-type]


class ExchangeRate(Strict):
    usd_cny: Number = Field(gt=0, description="CNY per 1 USD, e.g. 7.1")
    source: str = Field(min_length=1, description="where the rate comes from")
    as_of: datetime.date = Field(description="the rate's date, YYYY-MM-DD")


class DiscountRow(Strict):
    cloud: CloudName = Field(description="aws or tencentcloud")
    items: tuple[str, ...] = Field(default=("*",), min_length=1,
                                   description="items the discount applies to, or [\"*\"] for all: " + ", ".join(ITEMS))
    percent: Number = Field(gt=0, lt=100, description="percent off, between 0 and 100")
    source: str = Field(default="", description="the agreement")

    @field_validator("items")
    @classmethod
    def _items(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [i for i in v if i != "*" and i not in ITEMS]
        if bad:
            raise ValueError(f"unknown items {bad}; allowed: * or {', '.join(ITEMS)}")
        return v


class PriceRow(Strict):
    cloud: CloudName = Field(description="aws or tencentcloud")
    item: Item = Field(description=", ".join(ITEMS))
    key: str = Field(default=NO_KEY, min_length=1,
                     description="instance type, volume/disk type, throughput class, TB/TP, or '-' for items without one")
    region: Optional[str] = Field(default=None, description="a region of the cloud; leave out for every region")
    price: Number = Field(ge=0, description="the unit price, in `currency` per the item's unit")
    currency: Currency = Field(description="USD or CNY")
    source: str = Field(default="", description="where this figure comes from (defaults to the file's source)")
    note: str = Field(default="", description="free text shown beside the line")

    @model_validator(mode="after")
    def _region(self) -> "PriceRow":
        if self.region is not None and self.region not in catalog.regions(self.cloud):
            raise ValueError(f"region={self.region!r} is not a {self.cloud} region; allowed: one of "
                             f"{', '.join(catalog.regions(self.cloud)[:6])}, ... (or leave region out)")
        return self


class PriceFileBody(Strict):
    name: str = Field(min_length=1, description="a label for this set of prices")
    as_of: datetime.date = Field(description="when the prices were agreed or read, YYYY-MM-DD")
    source: str = Field(min_length=1, description="the agreement or quote the prices come from")
    exchange_rate: Optional[ExchangeRate] = Field(default=None, description="usd_cny, source, as_of")
    discounts: tuple[DiscountRow, ...] = Field(default=(), description="cloud, items, percent, source")
    prices: tuple[PriceRow, ...] = Field(default=(), description="cloud, item, key, region, price, currency")


class PriceFileDoc(Strict):
    price_file: PriceFileBody = Field(description="name, as_of, source, exchange_rate, discounts, prices")


class PriceFile:
    origin = "price file"

    def __init__(self, path: Path, body: PriceFileBody):
        self.path = path
        self.body = body
        self._rows: dict[tuple[str, str, str], list[PriceRow]] = {}
        for row in body.prices:
            self._rows.setdefault((row.cloud, row.item, row.key), []).append(row)

    @classmethod
    def load(cls, path: Path) -> "PriceFile":
        doc = load_yaml(path, "price file")
        if not isinstance(doc, dict):
            raise UserError(f"price file {path} must be a mapping with a `price_file:` key, got {kind_of(doc)}")
        try:
            parsed = PriceFileDoc.model_validate(doc)
        except ValidationError as e:
            found = problems(PriceFileDoc, "", e)
            raise UserError(f"price file {path}: " + "; ".join(p.lstrip(".") for p in found)) from None
        seen: dict[tuple, int] = {}
        for i, row in enumerate(parsed.price_file.prices):
            k = (row.cloud, row.item, row.key, row.region)
            if k in seen:
                raise UserError(f"price file {path}: price_file.prices[{i}] repeats price_file.prices[{seen[k]}] "
                                f"({row.cloud} {row.item} {row.key} in {row.region or 'every region'}); "
                                f"allowed: one price per item, key and region")
            seen[k] = i
        return cls(Path(path), parsed.price_file)

    @property
    def rate(self) -> Optional[Rate]:
        r = self.body.exchange_rate
        return Rate(usd_cny=r.usd_cny, source=f"{self.path}: {r.source}", as_of=r.as_of.isoformat()) if r else None

    @property
    def discounts(self) -> tuple[Discount, ...]:
        return tuple(Discount(cloud=d.cloud, items=d.items, percent=d.percent,
                              source=f"{self.path}: {d.source or self.body.source}", as_of=self.body.as_of.isoformat())
                     for d in self.body.discounts)

    def describe(self) -> str:
        return f"price file: {self.path} — {self.body.name} ({self.body.source}, {self.body.as_of})"

    def lookup(self, cloud: str, item: str, key: str, region: Optional[str]) -> Optional[Price]:
        rows = self._rows.get((cloud, item, key), [])
        exact = [r for r in rows if region is not None and r.region == region]
        anywhere = [r for r in rows if r.region is None]
        chosen = (exact or anywhere or [None])[0]
        if chosen is None:
            return None
        return Price(value=chosen.price, currency=chosen.currency, unit=ITEMS[item], origin=self.origin,
                     source=f"{self.path} ({self.body.name}{': ' + chosen.source if chosen.source else ''})",
                     as_of=self.body.as_of.isoformat(), region=chosen.region, note=chosen.note)
