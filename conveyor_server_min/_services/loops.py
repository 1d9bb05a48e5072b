"""The background timer loop: promoter, silent-session closer, reaper, group sweeper, wake-ups.

One asyncio task drives the engine's maintenance on the configured intervals
and wakes early when the engine reports an earlier timer (a retry backoff that
elapses, a rate-limit token that refills).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable

from conveyor_server_min._engine.clock import from_seconds, to_seconds
from conveyor_server_min._engine.engine import Engine

__all__ = ["Ticker"]

log = logging.getLogger("conveyor.server.loops")
_MIN_SLEEP = 0.002


class Ticker:
    """Runs ``engine.promote/reap/sweep_groups/wake_due`` on their cadences (monotonic time)."""

    def __init__(self, engine: Engine, extra: Callable[[], object] | None = None) -> None:
        self.engine = engine
        self._extra = extra
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
        due = [time.monotonic() + interval for interval, _ in jobs]
        while True:
            mono = time.monotonic()
            for i, (interval, job) in enumerate(jobs):
                if mono >= due[i]:
                    self._safely(job)
                    due[i] = mono + max(interval, _MIN_SLEEP)
            timer = self.engine.next_timer()
            wall = self.engine.now()
            if timer is not None and timer <= wall:
                self._safely(self.engine.wake_due)
                timer = self.engine.next_timer()
            delay = min(due) - time.monotonic()
            if timer is not None:
                delay = min(delay, to_seconds(timer - wall))
            delay = max(delay, _MIN_SLEEP)
            self._planned = wall + from_seconds(delay)
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), delay)

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
