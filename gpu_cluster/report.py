"""The per-stack report beside each plan: what it is, what it costs, what it breaks.

Prices come from the stack's price book: the user price file (`--prices FILE`, or the stack config
key `gpu-cluster:prices` — a path relative to the stack file; the option wins when both are given),
then the committed price cache (prices/cache.json), then the catalog. The report's
`monthly_cost.price_sources` lists them; every line item names the origin, source and date of its
price. The budget policy judges the same estimate.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from gpu_cluster.errors import UserError
from gpu_cluster.plan import Plan
from gpu_cluster.render import Rendered

PRICES_KEY = "gpu-cluster:prices"
"""Stack config key naming the stack's price file (relative to the stack file's folder)."""


@lru_cache(maxsize=16)
def _book(price_file: Optional[str]):
    from gpu_cluster.pricebook import load_book

    return load_book(Path(price_file) if price_file else None)


def price_file_for(prices: Optional[str], stack_file: Any = None) -> Optional[Path]:
    """The price file a stack is priced with: the `--prices` option, else its `gpu-cluster:prices` key."""
    if prices:
        return Path(prices)
    config = getattr(stack_file, "config", None) or {}
    value = config.get(PRICES_KEY)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"stack file {stack_file.path}: {PRICES_KEY}={value!r} is not a path; allowed: the path "
                        f"of a price file, relative to the stack file (e.g. ../prices/negotiated.yaml)")
    return Path(stack_file.path).parent / value


def book_for(prices: Optional[str] = None, stack_file: Any = None):
    """The price book of one stack (cached per price file)."""
    path = price_file_for(prices, stack_file)
    return _book(str(path) if path else None)


def build_report(rendered: Rendered, plan: Plan, policy_config: Optional[dict] = None,
                 prices: Optional[str] = None, stack_file: Any = None) -> dict[str, Any]:
    from gpu_cluster.policyrun import run_policies
    from gpu_cluster.pricing import price_plan, pricer_for

    cluster = rendered.cluster
    spec = cluster.spec
    book = book_for(prices, stack_file)
    cost = price_plan(plan, book)
    violations = run_policies(plan, policy_config, pricer=pricer_for(book))
    return {
        "stack": rendered.stack,
        "cloud": spec.cloud,
        "tier": spec.tier,
        "shape": cluster.shape.type,
        "nodes": spec.nodes,
        "gpus": cluster.gpus,
        "resources": sum(1 for _ in plan.custom()),
        "monthly_cost": cost.as_dict(),
        "budget": {"monthly_limit": spec.budget.monthly_limit, "currency": spec.budget.currency},
        "violations": [v.as_dict() for v in violations],
        "notes": list(cluster.notes),
        "ignore_changes": rendered.ignore_changes(),
    }
