"""The shared snapshot schedule (components/snapshot_schedules.py): pure, no mocks."""

import pytest

from components.snapshot_schedules import ALL_WEEKDAYS, snapshot_hours


@pytest.mark.parametrize("every, hours", [
    (1, list(range(24))),
    (6, [0, 6, 12, 18]),
    (8, [0, 8, 16]),
    (12, [0, 12]),
    (24, [0]),
])
def test_hours_start_at_midnight_and_repeat_evenly(every, hours):
    assert snapshot_hours(every) == hours


def test_first_hour_shifts_the_schedule():
    assert snapshot_hours(12, first_hour=3) == [3, 15]


@pytest.mark.parametrize("every", [0, 5, 7, 25])
def test_intervals_that_do_not_divide_a_day_are_refused(every):
    with pytest.raises(ValueError, match=f"every_hours={every}"):
        snapshot_hours(every)


def test_first_hour_must_fall_inside_the_interval():
    with pytest.raises(ValueError, match="first_hour=6"):
        snapshot_hours(6, first_hour=6)


def test_all_weekdays_uses_sunday_zero():
    assert ALL_WEEKDAYS == (0, 1, 2, 3, 4, 5, 6)
