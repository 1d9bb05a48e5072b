"""Injectable time: the engine never reads the system clock directly.

Times are float seconds since the Unix epoch (wall clock), because task
timestamps (enqueued_at, deadline, process_at) are wall-clock instants on the
wire. Tests use :class:`FakeClock` and advance it explicitly; nothing sleeps.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    """A source of "now" in epoch seconds."""

    def now(self) -> float: ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> float:
        return time.time()

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A manually driven clock for tests."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` and return the new now."""
        self._now += seconds
        return self._now

    def set(self, instant: float) -> None:
        """Jump to an absolute instant."""
        self._now = float(instant)

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r})"
