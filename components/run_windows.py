"""Run windows ("Mon-Fri 09:00-21:00") as data: parsing, start/stop events, hours a week (pure).

The spec's `schedule.windows` say when the GPU nodes run; each cloud turns the same events into its
own scheduler (AWS EventBridge Scheduler cron expressions), and the pricer counts only the hours
inside the windows. A window lies within one day (start before end, 24:00 allowed as the end);
a night shift is two windows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
HOURS_PER_WEEK = 168
HOURS_PER_MONTH = 730
"""The month every estimate uses: 365 days × 24 h / 12 (the clouds' own hourly-to-monthly convention)."""
WEEKS_PER_MONTH = HOURS_PER_MONTH / HOURS_PER_WEEK
_WINDOW = re.compile(r"(?P<d1>[A-Z][a-z]{2})(?:-(?P<d2>[A-Z][a-z]{2}))? (?P<h1>[0-9]{2}):(?P<m1>[0-9]{2})-(?P<h2>[0-9]{2}):(?P<m2>[0-9]{2})")
FORMAT = 'days and hours like "Mon-Fri 09:00-21:00" or "Sat 10:00-16:00" (days Mon..Sun, start before end)'


@dataclass(frozen=True)
class Window:
    days: tuple[int, ...]
    """0 = Monday … 6 = Sunday."""
    start: int
    """Minutes after midnight."""
    end: int

    @property
    def minutes_a_week(self) -> int:
        return len(self.days) * (self.end - self.start)


class WindowError(ValueError):
    """A window that does not parse; the message says what is allowed."""


def parse(text: str) -> Window:
    m = _WINDOW.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise WindowError(f"{text!r} is not a run window; allowed: {FORMAT}")
    d1, d2 = m["d1"], m["d2"] or m["d1"]
    if d1 not in DAYS or d2 not in DAYS:
        raise WindowError(f"{text!r}: days are {', '.join(DAYS)}")
    first, last = DAYS.index(d1), DAYS.index(d2)
    if last < first:
        raise WindowError(f"{text!r}: the day range must run forward within a week (e.g. Mon-Fri)")
    h1, m1, h2, m2 = (int(m[k]) for k in ("h1", "m1", "h2", "m2"))
    if h1 > 23 or m1 > 59 or m2 > 59 or h2 > 24 or (h2 == 24 and m2):
        raise WindowError(f"{text!r}: hours are 00:00 to 24:00")
    start, end = h1 * 60 + m1, h2 * 60 + m2
    if end <= start:
        raise WindowError(f"{text!r}: the window must end after it starts on the same day (split a night shift "
                          f"into two windows, e.g. \"Mon 22:00-24:00\" and \"Tue 00:00-06:00\")")
    return Window(days=tuple(range(first, last + 1)), start=start, end=end)


def overlaps(windows: list[Window]) -> list[str]:
    """Pairs of windows that share minutes, as day names (a node cannot be started twice)."""
    out = []
    for i, a in enumerate(windows):
        for b in windows[i + 1:]:
            for day in set(a.days) & set(b.days):
                if a.start < b.end and b.start < a.end:
                    out.append(DAYS[day])
    return sorted(set(out), key=DAYS.index)


def weekly_hours(windows: list[Window]) -> float:
    return sum(w.minutes_a_week for w in windows) / 60


@dataclass(frozen=True)
class Event:
    """Start or stop the nodes at `minute` of the listed days (local time of the schedule)."""

    action: str  # "start" | "stop"
    days: tuple[int, ...]
    minute: int

    def cron(self) -> str:
        """EventBridge Scheduler cron: cron(minutes hours day-of-month month day-of-week year); the
        day-of-week field takes MON..SUN (EventBridge Scheduler user guide, "Schedule types")."""
        hour, minute = divmod(self.minute % (24 * 60), 60)
        days = ",".join(DAYS[d].upper() for d in self.days)
        return f"cron({minute} {hour} ? * {days} *)"


def events(windows: list[Window]) -> list[Event]:
    """The week's start and stop edges, one event per action and minute (its days grouped). A window
    ending at 24:00 stops at 00:00 the next day; where one window ends as the next begins (a night
    shift split at midnight) there is no edge at all, so the nodes keep running."""
    marks: dict[tuple[int, int], set[str]] = {}
    for w in windows:
        for d in w.days:
            marks.setdefault((d, w.start), set()).add("start")
            marks.setdefault(((d + 1) % 7, 0) if w.end == 24 * 60 else (d, w.end), set()).add("stop")
    grouped: dict[tuple[str, int], list[int]] = {}
    for (day, minute), actions in sorted(marks.items()):
        if len(actions) == 1:
            grouped.setdefault((actions.pop(), minute), []).append(day)
    order = {"start": 0, "stop": 1}
    return [Event(action, tuple(days), minute)
            for (action, minute), days in sorted(grouped.items(), key=lambda kv: (order[kv[0][0]], kv[1][0], kv[0][1]))]


_CRON = re.compile(r"cron\((?P<min>\d+) (?P<hour>\d+) \? \* (?P<dow>[A-Z,]+) \*\)")


def running_hours_a_week(crons: list[tuple[str, str]]) -> float:
    """Hours a week a node runs under (action, cron) events — the reverse of `events`, for the pricer,
    which reads schedules back from a plan. Starts at the week's first start; unknown crons → 168."""
    marks = []
    for action, cron in crons:
        m = _CRON.fullmatch(cron)
        if m is None:
            return float(HOURS_PER_WEEK)
        for day in m["dow"].split(","):
            if day.title() not in DAYS:
                return float(HOURS_PER_WEEK)
            marks.append((DAYS.index(day.title()) * 1440 + int(m["hour"]) * 60 + int(m["min"]), action))
    if not any(a == "start" for _, a in marks):
        return float(HOURS_PER_WEEK)
    marks.sort()
    # Running at the week's start exactly when the week's last event is a start (it wraps around).
    running, since, total = marks[-1][1] == "start", 0, 0
    for minute, action in marks:
        if action == "start" and not running:
            running, since = True, minute
        elif action == "stop" and running:
            running = False
            total += minute - since
    if running:
        total += 7 * 1440 - since
    return total / 60
