"""What a plan says about Slurm power saving, read the same way on every cloud: the tags components/slurm/power.py
plan_tags puts on each GPU node instance Slurm starts and stops (the run windows' hours a week, the idle stop)."""

from __future__ import annotations

from typing import Optional

from components.slurm.power import IDLE_MINUTES_TAG, POWER_TAG, RUN_HOURS_TAG
from gpu_cluster.plan import Plan, Resource, number
from gpu_cluster.pricing import WEEKS_PER_MONTH


def powered(plan: Plan, instance_type: str, tag: str) -> list[Resource]:
    """The instances of `instance_type` Slurm starts and stops that carry `tag`."""
    return [r for r in plan.of_type(instance_type) if isinstance(r.props.get("tags"), dict)
            and r.props["tags"].get(POWER_TAG) == "slurm" and tag in r.props["tags"]]


def scheduled_hours(plan: Plan, instance_type: str) -> Optional[tuple[float, set[str]]]:
    """Hours a month the run windows let Slurm run its nodes, and their ids; None where no node says (or they
    disagree)."""
    slurm = powered(plan, instance_type, RUN_HOURS_TAG)
    weekly = {number(r.props["tags"][RUN_HOURS_TAG]) for r in slurm}
    if len(weekly) != 1 or None in weekly:
        return None
    return weekly.pop() * WEEKS_PER_MONTH, {i for r in slurm for i in (r.id, r.outputs.get("id")) if i}


def idle_stops(plan: Plan, instance_type: str) -> bool:
    """Slurm stops idle nodes (SuspendTime)."""
    return bool(powered(plan, instance_type, IDLE_MINUTES_TAG))
