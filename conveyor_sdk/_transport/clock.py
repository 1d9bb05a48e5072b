"""The SDK's one injectable clock: where the worker, the runtime and the keepalive read time and
arm their timers.

Three things need time outside the sans-I/O layers:

* the worker driver: the session machine is told ``now`` (wall seconds, since leases and task
  deadlines are wall instants) and exposes its next deadline, which the driver arms with
  :meth:`Clock.call_at`; the heal probe waits between probes with :meth:`Clock.sleep`;
* the runtime's fleet and process executor: beats, respawn backoffs and start-up bounds on
  :meth:`Clock.monotonic`, the kill after ``kill_grace`` with :meth:`Clock.call_later`, job
  deadlines against :meth:`Clock.time`;
* a connection's keepalive: PINGs and their timeouts on :meth:`Clock.monotonic` (safe from
  wall-clock steps) and :meth:`Clock.call_later`.

:class:`SystemClock` is the real one (the process's clocks, the running loop's timers).
:class:`ManualClock` stands still until a test moves it, so those decisions are tested at their
exact instants without waiting (the peers and the children stay real).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable
from typing import Protocol

from conveyor_sdk.errors import InvalidArgument

__all__ = ["Clock", "ManualClock", "SystemClock", "Timer"]


class Timer(Protocol):
    """A scheduled callback that can be called off (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Time as the SDK reads it: a wall clock, a monotonic clock and one-shot callbacks."""

    def now(self) -> float:
        """Wall-clock seconds since the epoch (what the session machine is told)."""
        ...

    def time(self) -> float:
        """The same wall clock as :meth:`now` (the name the runtime reads it by)."""
        ...

    def monotonic(self) -> float:
        """Seconds that never go back (beats, backoffs, keepalive, start-up bounds)."""
        ...

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        """Call ``callback()`` on the running event loop once ``now() >= when``."""
        ...

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        """Call ``callback()`` on the running event loop ``seconds`` from now."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class SystemClock:
    """The process's wall and monotonic clocks and the running loop's timers (the default)."""

    # The C functions themselves: the driver reads the clock for every frame and the executor for
    # every job, so a reading adds no Python frame.
    now = staticmethod(time.time)
    monotonic = staticmethod(time.monotonic)
    time = staticmethod(time.time)  # last: the right-hand side still sees the module here

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, when - time.time()), callback)

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_later(seconds, callback)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


class _Pending:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


_Heap = list[tuple[float, int, _Pending]]


class ManualClock:
    """A clock for tests (one event loop thread): nothing happens until :meth:`advance` moves it.

    The wall and monotonic clocks move together. ``monotonic`` is never 0 by default: the fleet
    reads a ready_at of 0.0 as "never got ready". The default ``wall`` (2096) lies far ahead of the real
    date, so a virtual deadline can never read as past to a process that compares it with its real
    clock, whatever the date the tests run on.
    """

    def __init__(self, *, wall: float = 4_000_000_000.0, monotonic: float = 1000.0) -> None:
        for name, value in (("wall", wall), ("monotonic", monotonic)):
            if not isinstance(value, int | float) or not math.isfinite(value):
                raise InvalidArgument(f"ManualClock {name} must be a finite number of seconds, got {value!r}")
        self._wall = float(wall)
        self._mono = float(monotonic)
        # Each timer stays on the clock it was asked on (call_at: wall; call_later and sleep:
        # monotonic) and is compared with that clock's own reading: converting between the two
        # would round, and a deadline at now() + 0.5 might then miss the instant 0.5 s on.
        self._at: _Heap = []
        self._later: _Heap = []
        self._order = itertools.count()

    def __repr__(self) -> str:
        return f"ManualClock(wall={self._wall:.3f}, monotonic={self._mono:.3f}, timers={self.pending})"

    def now(self) -> float:
        return self._wall

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        pending = _Pending(callback)
        heapq.heappush(self._at, (when, next(self._order), pending))
        return pending

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        pending = _Pending(callback)
        heapq.heappush(self._later, (self._mono + max(0.0, seconds), next(self._order), pending))
        return pending

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

    @property
    def pending(self) -> int:
        """How many callbacks wait (cancelled ones not counted)."""
        return sum(not entry[2].cancelled for heap in (self._at, self._later) for entry in heap)

    @property
    def next_timer(self) -> float | None:
        """Seconds until the earliest pending callback is due (None: none is)."""
        waits = [
            heap[0][0] - reading
            for heap, reading in ((self._at, self._wall), (self._later, self._mono))
            if _drop_cancelled(heap)
        ]
        return max(0.0, min(waits)) if waits else None

    async def advance(self, seconds: float) -> None:
        """Move both clocks on by ``seconds`` (>= 0). Each callback due on the way runs at its own
        instant, earliest first, and what it wakes runs (a few loop turns) before time moves on;
        the test then waits for what it expects (``tests._util.until``).

        A real peer's answer takes real time: advance in steps shorter than the timeout that
        waits for it (a PING's answer, say), or that timeout may fire first.
        """
        if not seconds >= 0:
            raise InvalidArgument(f"a clock only moves forward, got {seconds!r}")
        wall_to, mono_to = self._wall + seconds, self._mono + seconds
        while (pending := self._pop_due(wall_to, mono_to)) is not None:
            pending.callback()
            for _ in range(5):  # let the woken task run up to its next wait
                await asyncio.sleep(0)
        # the targets computed up front, not the sum of the steps: a test's 0.49 + 0.01 lands
        # where the code under test computed "0.5 s on" from the same starting reading
        self._wall, self._mono = max(self._wall, wall_to), max(self._mono, mono_to)
        await asyncio.sleep(0)

    def _pop_due(self, wall_to: float, mono_to: float) -> _Pending | None:
        """Take the earliest callback due by the targets, moving both clocks to its instant."""
        at = self._at[0] if _drop_cancelled(self._at) and self._at[0][0] <= wall_to else None
        later = self._later[0] if _drop_cancelled(self._later) and self._later[0][0] <= mono_to else None
        if at is None and later is None:
            return None
        wait_at = math.inf if at is None else at[0] - self._wall
        wait_later = math.inf if later is None else later[0] - self._mono
        if at is not None and (later is None or (wait_at, at[1]) <= (wait_later, later[1])):
            heapq.heappop(self._at)
            step = max(0.0, wait_at)
            self._wall = max(self._wall, at[0])
            self._mono = min(self._mono + step, mono_to)
            return at[2]
        assert later is not None
        heapq.heappop(self._later)
        step = max(0.0, wait_later)
        self._mono = max(self._mono, later[0])
        self._wall = min(self._wall + step, wall_to)
        return later[2]


def _drop_cancelled(heap: _Heap) -> bool:
    """Pop cancelled callbacks off the top; True when a live one remains."""
    while heap and heap[0][2].cancelled:
        heapq.heappop(heap)
    return bool(heap)
