"""The worker driver's clock: wall time and the driver's own wake-up, injectable for tests.

The session machine is told ``now`` (epoch seconds) and exposes its next deadline; the driver
asks its :class:`Clock` for ``now`` and for a callback at that deadline. :class:`SystemClock`
is the real one (``time.time`` and an event-loop timer). :class:`ManualClock` stands still
until the test moves it, so lease, heartbeat, deadline and reconnect-backoff behaviour of a
running driver is tested in virtual time, without waiting seconds of wall-clock time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

from conveyor_sdk.errors import InvalidArgument

__all__ = ["Clock", "ManualClock", "SystemClock", "Timer"]


class Timer(Protocol):
    """A scheduled wake-up that can be called off (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the driver needs of time: the wall clock and one-shot callbacks at a wall time."""

    def now(self) -> float:
        """Seconds since the epoch (the machine's ``now``)."""
        ...

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback()`` on the running event loop once ``now() >= when``."""
        ...


class SystemClock:
    """``time.time`` and the running loop's timers (the default)."""

    now = staticmethod(time.time)  # the driver reads it for every frame and event

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, when - time.time()), callback)

    def __repr__(self) -> str:
        return "<SystemClock>"


class _ManualTimer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when :meth:`advance` is called (tests; one event loop thread).

    Due callbacks run inside :meth:`advance`, in time order; the driver's callback only wakes
    its loop, so the test then waits for what it expects (``tests._util.until``).
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        timer = _ManualTimer(callback)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    @property
    def next_timer(self) -> float | None:
        """When the earliest pending callback is due (None: none is)."""
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (>= 0) and run every callback that fell due."""
        if not seconds >= 0:
            raise InvalidArgument(f"a clock only moves forward, got {seconds!r}")
        self._now += seconds
        while self._timers and self._timers[0][0] <= self._now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                timer.callback()

    def __repr__(self) -> str:
        return f"<ManualClock now={self._now:.3f} timers={len(self._timers)}>"
