"""Cron specs: 6 fields, seconds first (``sec min hour dom month dow``), plus ``@hourly``-style
descriptors and ``@every <duration>``. Pure functions; times are UTC epoch nanoseconds (ints).

Fields accept ``*``, ``?`` (dom/dow), numbers, ``a-b`` ranges, ``/step`` and comma lists; months
accept JAN-DEC and weekdays SUN-SAT (0-6, 7 also means Sunday). When both day-of-month and
day-of-week are restricted a day matching either fires (classic cron semantics).
"""

from __future__ import annotations

import calendar
import datetime as dt
from dataclasses import dataclass

from conveyor_sdk.durations import parse_duration
from conveyor_server_min._engine.clock import NANOS, from_seconds

__all__ = ["CronSchedule", "parse_cron"]

_MONTHS = {name.upper(): i for i, name in enumerate(calendar.month_abbr) if name}
_DAYS = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
_BOUNDS = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
_DESCRIPTORS = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
_HORIZON_DAYS = 366 * 5
_MAX_EVERY = 315_576_000_000


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A parsed spec: allowed values per field, or a fixed interval for ``@every``."""

    seconds: frozenset[int] = frozenset()
    minutes: frozenset[int] = frozenset()
    hours: frozenset[int] = frozenset()
    days: frozenset[int] = frozenset()
    months: frozenset[int] = frozenset()
    weekdays: frozenset[int] = frozenset()
    dom_star: bool = True
    dow_star: bool = True
    every: int = 0  # nanoseconds

    def next_after(self, now: int) -> int | None:
        """First fire instant strictly after ``now`` (None if none within five years)."""
        if self.every > 0:
            return now + self.every
        t = dt.datetime.fromtimestamp(now // NANOS + 1, dt.UTC)
        end = t + dt.timedelta(days=_HORIZON_DAYS)
        while t < end:
            if t.month not in self.months:
                t = (t.replace(day=1) + dt.timedelta(days=32)).replace(day=1, hour=0, minute=0, second=0)
            elif not self._day_ok(t):
                t = (t + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0)
            elif t.hour not in self.hours:
                t = (t + dt.timedelta(hours=1)).replace(minute=0, second=0)
            elif t.minute not in self.minutes:
                t = (t + dt.timedelta(minutes=1)).replace(second=0)
            elif t.second not in self.seconds:
                t += dt.timedelta(seconds=1)
            else:
                return int(t.timestamp()) * NANOS
        return None

    def _day_ok(self, t: dt.datetime) -> bool:
        dom = t.day in self.days
        dow = (t.isoweekday() % 7) in self.weekdays
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow


def _value(text: str, index: int) -> int:
    names = _MONTHS if index == 4 else _DAYS if index == 5 else {}
    upper = text.upper()
    if upper in names:
        return names[upper]
    if not text.isdigit():
        raise ValueError(f"bad value {text!r}")
    return int(text)


def _field(text: str, index: int) -> tuple[frozenset[int], bool]:
    lo, hi = _BOUNDS[index]
    star = text in ("*", "?")
    out: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if step_text and (not step_text.isdigit() or step < 1):
            raise ValueError(f"bad step in {part!r}")
        if base in ("*", "?"):
            start, stop = lo, hi
        elif "-" in base:
            a, b = base.split("-", 1)
            start, stop = _value(a, index), _value(b, index)
        else:
            start = _value(base, index)
            stop = hi if step_text else start
        if not (lo <= start <= stop <= hi):
            raise ValueError(f"{part!r} out of range {lo}-{hi}")
        out.update(range(start, stop + 1, step))
    if index == 5 and 7 in out:
        out = (out - {7}) | {0}
    return frozenset(out), star


def parse_cron(spec: str) -> CronSchedule:
    """Parse ``spec``; raises ValueError with a reason when it is not a valid 6-field spec."""
    spec = spec.strip()
    if spec.startswith("@every "):
        seconds = parse_duration(spec.removeprefix("@every ").strip())
        if not seconds <= _MAX_EVERY:  # also rejects inf and nan
            raise ValueError(f"@every is limited to {_MAX_EVERY} seconds (the protobuf Duration range)")
        every = from_seconds(seconds)
        if every <= 0:
            raise ValueError("@every needs a positive duration")
        return CronSchedule(every=every)
    spec = _DESCRIPTORS.get(spec, spec)
    fields = spec.split()
    if len(fields) != 6:
        raise ValueError(f"expected 6 fields (seconds first), got {len(fields)}")
    parsed = [_field(text, i) for i, text in enumerate(fields)]
    return CronSchedule(
        seconds=parsed[0][0],
        minutes=parsed[1][0],
        hours=parsed[2][0],
        days=parsed[3][0],
        months=parsed[4][0],
        weekdays=parsed[5][0],
        dom_star=parsed[3][1],
        dow_star=parsed[5][1],
    )
