"""The per-stack report beside each plan (DESIGN §5): what it is, what it costs, what it breaks."""

from __future__ import annotations

from typing import Any, Optional

from gpu_cluster.plan import Plan
from gpu_cluster.render import Rendered


def build_report(rendered: Rendered, plan: Plan, policy_config: Optional[dict] = None) -> dict[str, Any]:
    from gpu_cluster.policyrun import run_policies
    from gpu_cluster.pricing import price_plan

    cluster = rendered.cluster
    spec = cluster.spec
    cost = price_plan(plan)
    violations = run_policies(plan, policy_config)
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
    }
