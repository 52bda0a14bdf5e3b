"""Snapshot schedules as data, shared by both clouds (pure functions, no Pulumi).

A spec says "every N hours"; providers want the hours of the day a snapshot starts (Tencent CBS
`repeat_hours`, CFS `hour`) or an interval plus a start time (AWS DLM). Both come from here so the
two clouds snapshot at the same hours for the same spec.
"""

from __future__ import annotations

DAY_HOURS = 24
ALL_WEEKDAYS: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6)
"""Every day of the week, 0 = Sunday (the numbering of Tencent CBS `repeat_weekdays`)."""


def snapshot_hours(every_hours: int, first_hour: int = 0) -> list[int]:
    """Hours of the day (0-23) at which an every-`every_hours` schedule starts a snapshot.

    `every_hours` must divide a day evenly (1, 2, 3, 4, 6, 8, 12 or 24) so that the gap is the same
    across midnight; `first_hour` (0 .. every_hours-1) shifts the whole schedule.
    >>> snapshot_hours(6)
    [0, 6, 12, 18]
    """
    if every_hours < 1 or DAY_HOURS % every_hours:
        raise ValueError(f"every_hours={every_hours} does not divide a day evenly; "
                         f"allowed: {', '.join(str(h) for h in range(1, DAY_HOURS + 1) if DAY_HOURS % h == 0)}")
    if not 0 <= first_hour < every_hours:
        raise ValueError(f"first_hour={first_hour} must be between 0 and every_hours-1 ({every_hours - 1})")
    return list(range(first_hour, DAY_HOURS, every_hours))
