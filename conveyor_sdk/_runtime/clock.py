"""The runtime's time: where the process executor reads "now", sleeps and arms its timers.

The fleet decides on time in four places: a child is hung when its beats stop for ``hung_after``
(and killed once a job's deadline has passed), a job that ignores its cancel is killed after
``kill_grace``, a dying child is respawned after a backoff, and children have ``start_timeout`` to
get ready. :class:`SystemClock` (the default) is the process's clocks and the event loop's
timers; :class:`ManualClock` moves only when a test calls :meth:`ManualClock.advance`, so those
decisions are tested at their exact instants without waiting (the children stay real processes).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["ManualClock", "RuntimeClock", "SystemClock", "Timer"]


class Timer(Protocol):
    """A pending callback (``asyncio.TimerHandle`` satisfies it)."""

    def cancel(self) -> None: ...


class RuntimeClock(Protocol):
    """Time as the fleet and the process executor read it."""

    def monotonic(self) -> float:
        """Seconds that never go back (beats, backoffs, start-up bounds)."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch (task deadlines are wall instants)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        """Run ``callback`` after ``seconds`` on the running loop."""
        ...


class SystemClock:
    """The process's monotonic and wall clocks, and the event loop's timers."""

    # The C functions themselves: reading the clock for each job adds no Python frame.
    monotonic = staticmethod(time.monotonic)
    time = staticmethod(time.time)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_later(seconds, callback)

    def __repr__(self) -> str:
        return "SystemClock()"


class _Pending:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock for tests: nothing happens until :meth:`advance` moves it."""

    def __init__(self, *, start: float = 1000.0, wall: float = 1_800_000_000.0) -> None:
        # ``start`` is never 0: the fleet reads a ready_at of 0.0 as "never got ready"
        self._now = start
        self._wall_offset = wall - start
        self._timers: list[tuple[float, int, _Pending]] = []
        self._order = itertools.count()

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now}, timers={len(self._timers)})"

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._now + self._wall_offset

    async def sleep(self, seconds: float) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not done.done():
                done.set_result(None)

        timer = self.call_later(seconds, wake)
        try:
            await done
        finally:
            timer.cancel()

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        pending = _Pending(callback)
        heapq.heappush(self._timers, (self._now + max(0.0, seconds), next(self._order), pending))
        return pending

    async def advance(self, seconds: float) -> None:
        """Move on by ``seconds``: each timer due on the way fires at its own instant, in order, and
        what it wakes runs (a few loop turns) before time moves further."""
        target = self._now + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, pending = heapq.heappop(self._timers)
            if pending.cancelled:
                continue
            self._now = max(self._now, when)
            pending.callback()
            for _ in range(5):  # let the woken task run up to its next wait
                await asyncio.sleep(0)
        self._now = max(self._now, target)
        await asyncio.sleep(0)
