"""What a healthy node of a shape shows: catalog/fabric.yaml, read by a thin loader.

Each row names its sources (keys of the file's own `sources` map) and the date they were read;
a value nobody published is None and a value not seen in a primary source is listed under the
row's `unconfirmed`. GPU count, model, memory and EFA/RDMA device count come from the shape's
instances.yaml row (components.catalog.Shape), never from here.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping, Optional

from components import catalog
from components.catalog import Cloud


@dataclass(frozen=True)
class Fabric:
    """Expected GPU fabric and NCCL numbers of one shape (one fabric.yaml row)."""

    cloud: Cloud
    type: str
    nvlink: bool
    """Every GPU must show active NVLink links and none `<inactive>`."""
    nvlink_links_per_gpu: Optional[int]
    """Active links each GPU must show; None: not published, only "≥ 1 active, none inactive"."""
    fabric_manager: bool
    """nvidia-fabricmanager must be active (NVSwitch baseboards)."""
    allreduce_busbw_gbps: Optional[float]
    """Published 2-node all_reduce_perf bus bandwidth, GB/s; None: nobody published one."""
    allreduce_message_bytes: Optional[int]
    """Message size the published figure was measured at."""
    allreduce_pass_fraction: Optional[float]
    """The NCCL job passes at busbw ≥ fraction × allreduce_busbw_gbps."""
    nccl_env: Mapping[str, str]
    source: tuple[str, ...]
    as_of: datetime.date
    unconfirmed: tuple[str, ...] = ()
    note: str = ""

    @property
    def allreduce_threshold_gbps(self) -> Optional[float]:
        """The bus bandwidth the shipped NCCL job requires; None when no figure is published."""
        if self.allreduce_busbw_gbps is None or self.allreduce_pass_fraction is None:
            return None
        return round(self.allreduce_busbw_gbps * self.allreduce_pass_fraction, 2)


@dataclass(frozen=True)
class FioSettings:
    size_mib: int
    runtime_s: int
    block_size: str
    min_iops: Optional[int]


@lru_cache(maxsize=None)
def _document() -> dict[str, Any]:
    return catalog.read("fabric.yaml")


@lru_cache(maxsize=None)
def fabrics(cloud: Cloud) -> dict[str, Fabric]:
    """Every fabric row of `cloud`, by instance type."""
    out: dict[str, Fabric] = {}
    for row in _document()["shapes"]:
        if row["cloud"] != cloud:
            continue
        row = dict(row)
        row["source"] = tuple(row["source"])
        row["unconfirmed"] = tuple(row.get("unconfirmed", ()))
        row["nccl_env"] = dict(row["nccl_env"])
        out[row["type"]] = Fabric(**row)
    return out


def fabric(cloud: Cloud, instance_type: str) -> Fabric:
    """The fabric row of a shape; a shape without one is a catalog error, said plainly."""
    try:
        return fabrics(cloud)[instance_type]
    except KeyError:
        raise KeyError(f"catalog/fabric.yaml has no row for {cloud} {instance_type}: add one "
                       f"(with its source) before this shape can run Slurm") from None


def gpu_mem_min_fraction() -> float:
    return float(_document()["defaults"]["gpu_mem_min_fraction"])


def fio_settings() -> FioSettings:
    return FioSettings(**_document()["defaults"]["fio"])


@lru_cache(maxsize=None)
def sources() -> dict[str, str]:
    """What each source key of the fabric rows stands for."""
    return dict(_document()["sources"])
