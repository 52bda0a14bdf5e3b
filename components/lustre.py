"""Sizes of a parallel file system, as both clouds sell them: a list of first sizes, then whole steps."""

from __future__ import annotations

from typing import Optional


def lustre_capacity_ok(capacity: int, first: list[int], step: int, minimum: Optional[int] = None) -> bool:
    """True when `capacity` is one of `first`, or `first[-1]` (or `minimum`) plus whole `step`s."""
    if capacity in first:
        return True
    base = minimum if minimum is not None else first[-1]
    return capacity >= base and (capacity - base) % step == 0


def nearest_size(cap: int, first: list[int], step: int) -> int:
    """The allowed size nearest to `cap` (ties: the smaller): one of `first`, or first[-1] + k × step."""
    k = max(round((cap - first[-1]) / step), 1)
    candidates = first + [first[-1] + step * j for j in (k - 1, k, k + 1) if j >= 1]
    return min(candidates, key=lambda c: (abs(c - cap), c))
