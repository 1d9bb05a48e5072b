"""Injectable time, and the engine's one time representation: integer nanoseconds.

Every instant in the engine is an ``int`` count of nanoseconds since the Unix
epoch (wall clock, UTC), and every duration an ``int`` count of nanoseconds.
That is exactly what a protobuf ``Timestamp`` / ``Duration`` holds, so a value
goes from the wire to storage and back without rounding. Configuration stays in
float seconds (``EngineConfig``) and is converted once with :func:`from_seconds`.

The valid range is that of ``google.protobuf.Timestamp``: 0001-01-01T00:00:00Z
to 9999-12-31T23:59:59.999999999Z, i.e. :data:`MIN_INSTANT` .. :data:`MAX_INSTANT`.
These values do **not** fit a signed 64-bit integer (that covers only the years
1677-2262); a persistent broker must store them exactly, e.g. as the
``(seconds, nanos)`` pair from :func:`to_parts` in two INTEGER columns.
Instants the engine derives itself (retry due times, dispatch deadlines) are
clamped into the range with :func:`clamp`; instants derived from producer input
are validated by the services layer instead.

Tests use :class:`FakeClock` and advance it explicitly; nothing sleeps.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = [
    "MAX_INSTANT",
    "MIN_INSTANT",
    "NANOS",
    "Clock",
    "FakeClock",
    "SystemClock",
    "clamp",
    "from_parts",
    "from_seconds",
    "in_range",
    "to_parts",
    "to_seconds",
]

NANOS = 1_000_000_000
MIN_INSTANT = -62_135_596_800 * NANOS  # 0001-01-01T00:00:00Z
MAX_INSTANT = 253_402_300_799 * NANOS + NANOS - 1  # 9999-12-31T23:59:59.999999999Z


def from_seconds(seconds: float) -> int:
    """Float seconds (a config value) as integer nanoseconds, rounded to the nearest."""
    return round(seconds * NANOS)


def to_seconds(nanos: int) -> float:
    """Integer nanoseconds as float seconds (for sleeping and logs, never for storage)."""
    return nanos / NANOS


def to_parts(nanos: int) -> tuple[int, int]:
    """``(seconds, nanos)`` with ``0 <= nanos < 1e9``, the protobuf Timestamp normal form."""
    return divmod(nanos, NANOS)


def from_parts(seconds: int, nanos: int) -> int:
    """The inverse of :func:`to_parts`."""
    return seconds * NANOS + nanos


def in_range(instant: int) -> bool:
    """Whether ``instant`` is representable as a protobuf Timestamp."""
    return MIN_INSTANT <= instant <= MAX_INSTANT


def clamp(instant: int) -> int:
    """``instant`` limited to the Timestamp range."""
    return MIN_INSTANT if instant < MIN_INSTANT else MAX_INSTANT if instant > MAX_INSTANT else instant


class Clock(Protocol):
    """A source of "now" in integer nanoseconds since the epoch."""

    def now(self) -> int: ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> int:
        return time.time_ns()

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A manually driven clock for tests (starts at 2027-01-15T08:00:00Z)."""

    def __init__(self, start: int = 1_800_000_000 * NANOS) -> None:
        self._now = int(start)

    def now(self) -> int:
        return self._now

    def advance(self, seconds: float) -> int:
        """Move time forward by ``seconds`` (float, for readable tests) and return the new now."""
        self._now += from_seconds(seconds)
        return self._now

    def set(self, instant: int) -> None:
        """Jump to an absolute instant (nanoseconds)."""
        self._now = int(instant)

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r})"
