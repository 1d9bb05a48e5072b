"""The background timer loop: promoter, silent-session closer, reaper, group sweeper, wake-ups.

One asyncio task drives the engine's maintenance on the configured intervals
and wakes early when the engine reports an earlier timer (a retry backoff that
elapses, a rate-limit token that refills).

The loop reads its time and waits through a :class:`TickerTime`: :class:`RealTime`
(monotonic clock, real waits) in a server, :class:`VirtualTime` in tests, which
moves the engine's :class:`~conveyor_server_min._engine.clock.FakeClock` and the
ticker's waits together, so leases lapse, sessions go silent and backoffs elapse
when the test says so, without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from conveyor_server_min._engine.clock import NANOS, FakeClock, from_seconds, to_seconds
from conveyor_server_min._engine.engine import Engine

__all__ = ["RealTime", "Ticker", "TickerTime", "VirtualTime"]

log = logging.getLogger("conveyor.server.loops")
_MIN_SLEEP = 0.002
_SETTLE_WITHIN = 5.0  # real seconds a virtual-time test waits for the ticker to finish a pass


class TickerTime(Protocol):
    """Where the ticker reads its cadence clock and waits."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (cadences are measured on it)."""
        ...

    async def wait(self, kick: asyncio.Event, seconds: float) -> None:
        """Return when ``kick`` is set or ``seconds`` have passed, whichever is first."""
        ...


class RealTime:
    """The process's monotonic clock and real waits."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def wait(self, kick: asyncio.Event, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(kick.wait(), seconds)

    def __repr__(self) -> str:
        return "RealTime()"


class VirtualTime:
    """Time that moves only when a test calls :meth:`advance`, shared with the engine's FakeClock.

    Build the services with the same clock (``build_services(config, clock=vt.clock,
    ticker_time=vt)``): the engine's "now" and the ticker's cadences then move together.
    """

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self._origin = self.clock.now()  # monotonic() counts from here, as uptime does: a float of
        # seconds since the epoch would blur below a microsecond and make passes land too early
        self._sleepers: list[tuple[int, asyncio.Future[None]]] = []
        self._waiting = asyncio.Event()  # set while the ticker waits (its pass over)
        self.waits = 0  # waits the ticker has started (each ends one maintenance pass)

    def __repr__(self) -> str:
        return f"VirtualTime(now={self.clock.now()}, sleepers={len(self._sleepers)})"

    def monotonic(self) -> float:
        return to_seconds(self.clock.now() - self._origin)

    async def wait(self, kick: asyncio.Event, seconds: float) -> None:
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Rounded up: a real wait never ends early, so the pass it was planned for is due on waking.
        entry = (self.clock.now() + math.ceil(seconds * NANOS), wake)
        self._sleepers.append(entry)
        self.waits += 1
        self._waiting.set()
        kicked: asyncio.Future[Any] = asyncio.ensure_future(kick.wait())
        try:
            await asyncio.wait([wake, kicked], return_when=asyncio.FIRST_COMPLETED)
        finally:
            kicked.cancel()
            self._sleepers.remove(entry)
            self._waiting.clear()

    async def settle(self) -> None:
        """Until the ticker is waiting again, its pass over (TimeoutError after 5 real seconds:
        the ticker is not running)."""
        async with asyncio.timeout(_SETTLE_WITHIN):
            await self._waiting.wait()

    async def advance(self, seconds: float) -> None:
        """Move time on by ``seconds``; every wait ending on the way ends at its own instant, in
        order, and its maintenance pass runs before time moves further."""
        target = self.clock.now() + from_seconds(seconds)
        await self.settle()
        while True:
            due = [entry for entry in self._sleepers if entry[0] <= target and not entry[1].done()]
            if not due:
                break
            deadline, wake = min(due, key=lambda entry: entry[0])
            self.clock.set(max(self.clock.now(), deadline))
            self._waiting.clear()
            wake.set_result(None)
            await self.settle()
        self.clock.set(max(self.clock.now(), target))


class Ticker:
    """Runs ``engine.promote/reap/sweep_groups/wake_due`` on their cadences (``clock``: real time
    unless a test injects :class:`VirtualTime`)."""

    def __init__(
        self, engine: Engine, extra: Callable[[], object] | None = None, *, clock: TickerTime | None = None
    ) -> None:
        self.engine = engine
        self._extra = extra
        self._time = clock or RealTime()
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._planned: float = math.inf  # wall-clock nanoseconds of the next planned wake-up
        engine.on_timer_change = self._timer_changed

    def _timer_changed(self) -> None:
        timer = self.engine.next_timer()
        if timer is not None and timer < self._planned:
            self._kick.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="conveyor-ticker")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        cfg = self.engine.config
        jobs = [
            (cfg.promote_interval, self.engine.promote),
            (cfg.promote_interval, self._extra or (lambda: None)),
            (cfg.promote_interval, self.engine.close_silent),
            (cfg.reap_interval, self.reap),
            (cfg.group_sweep_interval, self.engine.sweep_groups),
        ]
        clock = self._time
        due = [clock.monotonic() + interval for interval, _ in jobs]
        while True:
            mono = clock.monotonic()
            for i, (interval, job) in enumerate(jobs):
                if mono >= due[i]:
                    self._safely(job)
                    due[i] = mono + max(interval, _MIN_SLEEP)
            timer = self.engine.next_timer()
            wall = self.engine.now()
            if timer is not None and timer <= wall:
                self._safely(self.engine.wake_due)
                timer = self.engine.next_timer()
            delay = min(due) - clock.monotonic()
            if timer is not None:
                delay = min(delay, to_seconds(timer - wall))
            delay = max(delay, _MIN_SLEEP)
            self._planned = wall + from_seconds(delay)
            self._kick.clear()
            await clock.wait(self._kick, delay)

    def reap(self) -> None:
        """The reaper pass. Silent sessions are closed first, so their tasks are released free
        rather than charged as lapsed leases (a silent session's bound never comes after its
        leases' lapse, so both can be due in one pass)."""
        self._safely(self.engine.close_silent)
        self.engine.reap()

    def _safely(self, job: object) -> None:
        try:
            job()  # type: ignore[operator]
        except Exception:  # isolation point: one failed pass must not stop maintenance
            log.exception("maintenance step %r failed", job)
