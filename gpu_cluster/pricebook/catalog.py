"""The lowest-precedence price source: public prices in the catalog (instances.yaml, prices.yaml)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional

from components import catalog
from gpu_cluster.pricebook import ITEMS, NO_KEY, Price, Rate


@lru_cache(maxsize=None)
def _exchange_rate() -> Rate:
    row = catalog.read("prices.yaml")["exchange_rate"]
    return Rate(usd_cny=float(row["usd_cny"]), source=row["source"], as_of=str(row["as_of"]))


def entry(cloud: str, item: str, key: str) -> Optional[dict[str, Any]]:
    """The raw prices.yaml entry of an item (None when the catalog has no row for it)."""
    p = catalog.prices(cloud)  # type: ignore[arg-type]
    row = p.get(item)
    if not isinstance(row, dict):
        return None
    if "price" in row:
        return row if key == NO_KEY else None
    found = row.get(key)
    if found is None and key.isdigit():
        found = row.get(int(key))
    return found if isinstance(found, dict) and "price" in found else None


class CatalogPrices:
    origin = "catalog"

    @property
    def rate(self) -> Rate:
        return _exchange_rate()

    def describe(self) -> str:
        return "catalog: components/catalog/prices.yaml and instances.yaml (public list prices, each row dated)"

    def lookup(self, cloud: str, item: str, key: str, region: Optional[str]) -> Optional[Price]:
        p = catalog.prices(cloud)  # type: ignore[arg-type]
        if item in ("instance", "instance_spot"):
            return self._instance(cloud, item, key, region)
        row = entry(cloud, item, key)
        if row is None or row.get("price") is None:
            return None
        regions = tuple(row.get("regions") or ([row["region"]] if row.get("region") else
                                               ([p["region"]] if p.get("region") else [])))
        return self._price(cloud, item, row, regions, region)

    def _instance(self, cloud: str, item: str, key: str, region: Optional[str]) -> Optional[Price]:
        if item == "instance_spot":
            return None  # spot = on-demand × the catalog's spot discount (pricing.py)
        shape = catalog.shape(cloud, key)  # type: ignore[arg-type]
        if shape is not None and shape.price_hourly is not None:
            regions = (shape.price_region,) if shape.price_region else ()
            row = {"price": shape.price_hourly, "currency": shape.currency, "as_of": shape.as_of.isoformat(),
                   "source": "instances.yaml " + ", ".join(catalog.source_labels(shape.source))}
            return self._price(cloud, item, row, regions, region)
        row = entry(cloud, "instance", key)
        if row is None or row.get("price") is None:
            return None
        regions = tuple(row.get("regions") or ([row["region"]] if row.get("region") else []))
        return self._price(cloud, item, row, regions, region)

    def _price(self, cloud: str, item: str, row: dict, regions: tuple[str, ...], region: Optional[str]) -> Price:
        p = catalog.prices(cloud)  # type: ignore[arg-type]
        notes, estimate = [], bool(row.get("unconfirmed"))
        if row.get("unconfirmed"):
            notes.append(row.get("note") or "third-party figure, not the cloud's own price table")
        if regions and region and region not in regions:
            estimate = True
            notes.append(f"priced at {'/'.join(regions)} rates; {region} not catalogued")
        return Price(value=float(row["price"]), currency=row.get("currency") or p["currency"], unit=ITEMS[item],
                     origin=self.origin, source=str(row["source"]), as_of=str(row["as_of"]),
                     region=regions[0] if len(regions) == 1 else None, estimate=estimate, note="; ".join(notes))


def spot_discount(cloud: str, instance_type: str) -> Optional[dict]:
    return (catalog.prices(cloud).get("spot_discount") or {}).get(instance_type)  # type: ignore[arg-type]
