"""The catalog: instance shapes, service limits and prices as sourced data, read by a thin loader.

The data lives in the YAML files beside this module; each row names its sources and the date they
were read. Nothing here guesses: a value nobody could confirm is listed under the row's
`unconfirmed`, and a missing price is `None` (reported as "unpriced", never as zero).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Optional, get_args

import yaml

Cloud = Literal["aws", "tencentcloud"]
CLOUDS: tuple[Cloud, ...] = ("aws", "tencentcloud")

_HERE = Path(__file__).parent


@dataclass(frozen=True)
class Shape:
    """One instance type, as sold by its cloud."""

    cloud: Cloud
    type: str
    family: str
    gpu: str
    gpu_count: int
    gpu_mem_gib: int
    vcpu: int
    mem_gib: int
    interconnect: Literal["pcie", "nvlink", "nvswitch"]
    rdma_interfaces: Optional[int]
    """EFA interfaces on AWS (0 = none); RDMA NICs on Tencent (None = RDMA present, count unpublished)."""
    network_gbps: int
    nvme_count: int
    nvme_gb: int
    price_hourly: Optional[float]
    currency: str
    source: tuple[str, ...]
    as_of: datetime.date
    price_region: Optional[str] = None
    regions: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    hpc: bool = False
    """Tencent HCC shape: must be created inside an HPC cluster."""
    block_only: bool = False
    """AWS shape sold only through EC2 Capacity Blocks (no on-demand offering in any region)."""
    unconfirmed: tuple[str, ...] = ()
    note: str = ""

    @property
    def rdma(self) -> bool:
        """True when the shape has EFA (AWS) or RDMA (Tencent HCC) networking."""
        return self.hpc or bool(self.rdma_interfaces)

    @property
    def has_nvme(self) -> bool:
        return self.nvme_count > 0

    @property
    def gpu_label(self) -> str:
        """E.g. "8×H100 80GB"."""
        return f"{self.gpu_count}×{self.gpu} {self.gpu_mem_gib}GB"


@dataclass(frozen=True)
class Limit:
    """One sourced service limit or enum value."""

    value: Any
    source: str
    as_of: datetime.date
    note: str = field(default="")


YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML was built with it (its wheels are), else PyYAML's own: how the
program reads every YAML file of its own (the catalog on every run, the contracts, stack files)."""


def read(name: str) -> Any:
    """A data file of this folder (instances.yaml, fabric.yaml, ...), parsed."""
    with open(_HERE / name, encoding="utf-8") as f:
        return yaml.load(f, Loader=YAML_LOADER)  # noqa: S506 - a safe loader


@lru_cache(maxsize=None)
def shapes(cloud: Cloud) -> dict[str, Shape]:
    """Every catalogued shape of `cloud`, by instance type."""
    out: dict[str, Shape] = {}
    for row in read("instances.yaml"):
        if row["cloud"] != cloud:
            continue
        row = dict(row)
        for key in ("source", "regions", "zones", "unconfirmed"):
            row[key] = tuple(row.get(key, ()))
        out[row["type"]] = Shape(**row)
    return out


def shape(cloud: Cloud, instance_type: str) -> Optional[Shape]:
    return shapes(cloud).get(instance_type)


@lru_cache(maxsize=None)
def newest_fact_date() -> datetime.date:
    """The date of the catalogue's newest dated fact (a shape or a limit of either cloud): the day it was last
    brought up to date, which offline renders use as their "today" where a resource needs one."""
    return max(x.as_of for cloud in get_args(Cloud) for x in (*shapes(cloud).values(), *limits(cloud).values()))


def limits(cloud: Cloud) -> dict[str, Limit]:
    """Every sourced limit of `cloud`, by name."""
    return {name: Limit(**row) for name, row in read("limits.yaml")[cloud].items()}


def limit(cloud: Cloud, name: str) -> Any:
    return limits(cloud)[name].value


@lru_cache(maxsize=None)
def sources() -> dict[str, str]:
    """What each source key of the rows stands for (sources.yaml): a URL or a repository file."""
    return read("sources.yaml")


def source_labels(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The full citation of each source key."""
    return tuple(f"{k}: {sources().get(k, 'unknown source')}" for k in keys)


def regions(cloud: Cloud) -> tuple[str, ...]:
    """Every region name of `cloud` (catalog limit `regions`, from the provider's own list)."""
    return tuple(limit(cloud, "regions"))


def region_of_zone(cloud: Cloud, zone: str) -> str:
    """The region a zone belongs to (us-east-1a → us-east-1; ap-shanghai-5 → ap-shanghai)."""
    from components.clouds import profile

    return profile(cloud).region_of_zone(zone)


def sold_regions(shape: Shape) -> tuple[str, ...]:
    """Regions where the catalog records `shape` as sold (from its regions or zones); () = not recorded."""
    if shape.regions:
        return shape.regions
    return tuple(dict.fromkeys(region_of_zone(shape.cloud, z) for z in shape.zones))


def sold_in(shape: Shape, region: str) -> bool:
    """False only when the catalog records where `shape` is sold and `region` is not among them."""
    recorded = sold_regions(shape)
    return not recorded or region in recorded


@lru_cache(maxsize=None)
def prices(cloud: Cloud) -> dict[str, Any]:
    """Storage, network and spot prices of `cloud` (prices.yaml), each entry with its source."""
    return read("prices.yaml")[cloud]
