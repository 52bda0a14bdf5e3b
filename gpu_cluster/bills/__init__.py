"""Each cloud's bill of materials of a plan: which resources cost, in which units, and the cost controls.

A bill has `cloud`, `currency` and `price(pricer, plan)`; gpu_cluster/pricing.py finds the plan's cloud,
asks its bill and never branches on the cloud. Adding a cloud adds a module here.
"""

from __future__ import annotations

from typing import Optional, Protocol


class Bill(Protocol):
    cloud: str
    currency: str

    def price(self, pricer, plan) -> None: ...


def bill_of(cloud: Optional[str]) -> Optional[Bill]:
    """The bill of `cloud`, or None for a plan of no cloud we price."""
    from gpu_cluster.bills import aws, tencentcloud

    return {b.cloud: b for b in (aws.BILL, tencentcloud.BILL)}.get(cloud or "")
