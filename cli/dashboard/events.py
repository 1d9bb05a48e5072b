"""A bounded ring buffer of recent task events, fed by one background ``WatchEvents`` stream.

The browser never holds a stream open: the events page and the overview's throughput column poll
this buffer. One consumer per dashboard process, whatever the number of open browser tabs, so the
server sees one WatchEvents stream. The stream reconnects after an error with capped back-off; events
emitted while it is down are not replayed (WatchEvents has no resume point).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass

from conveyor_cli.dashboard.history import SAMPLE_EVERY, History
from conveyor_sdk.client import Client, TaskEvent, TaskEventType
from conveyor_sdk.errors import ConveyorError

__all__ = ["EventFeed", "Received"]

log = logging.getLogger("conveyor.dashboard.events")

THROUGHPUT_WINDOW = 60.0  # seconds of COMPLETED events counted as "recent throughput"


@dataclass(frozen=True, slots=True)
class Received:
    """One event and the monotonic time this process received it."""

    event: TaskEvent
    at: float


class EventFeed:
    """Ring buffer + consumer task; ``error`` holds the last stream failure text ("" when healthy)."""

    def __init__(self, client: Client, size: int) -> None:
        self._client = client
        self._items: deque[Received] = deque(maxlen=size)
        # COMPLETED counts per queue in one-second buckets: exact whatever the event rate, bounded.
        self._done: deque[tuple[int, dict[str, int]]] = deque(maxlen=int(THROUGHPUT_WINDOW) + 1)
        self._task: asyncio.Task[None] | None = None
        self._sampler: asyncio.Task[None] | None = None
        self.history = History()  # the charts' last hour
        self.error = ""
        self.connected = False

    def recent(self, limit: int = 200) -> list[TaskEvent]:
        """Newest first, at most ``limit``."""
        items = list(self._items)[-limit:]
        return [r.event for r in reversed(items)]

    def completed_per_minute(self, now: float | None = None) -> dict[str, int]:
        """COMPLETED events per queue seen during the last minute."""
        cutoff = (time.monotonic() if now is None else now) - THROUGHPUT_WINDOW
        counts: dict[str, int] = {}
        for second, per_queue in self._done:
            if second >= cutoff:
                for queue, n in per_queue.items():
                    counts[queue] = counts.get(queue, 0) + n
        return counts

    def add(self, event: TaskEvent) -> None:
        """Record one event (the consumer calls this; public for tests and replays)."""
        now = time.monotonic()
        self._items.append(Received(event, now))
        self.history.event(event)
        if event.event_type is TaskEventType.COMPLETED:
            second = int(now)
            if not self._done or self._done[-1][0] != second:
                self._done.append((second, {}))
            bucket = self._done[-1][1]
            bucket[event.queue] = bucket.get(event.queue, 0) + 1

    def start(self) -> None:
        """Start the background consumer (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="conveyor-dashboard-events")
            self._sampler = asyncio.create_task(self._sample(), name="conveyor-dashboard-depth")

    async def stop(self) -> None:
        """Cancel the consumer and the depth sampler and wait for them."""
        for task in (self._task, self._sampler):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._sampler = None

    async def _sample(self) -> None:
        # Depth history even while nobody has the overview open (each overview view samples too).
        while True:
            with contextlib.suppress(ConveyorError):
                self.history.depth(await self._client.admin.list_queues())
            await asyncio.sleep(SAMPLE_EVERY)

    async def _run(self) -> None:
        delay = 0.5
        while True:
            try:
                self.connected = True
                async for event in self._client.admin.watch_events():
                    self.error = ""
                    delay = 0.5
                    self.add(event)
                self.error = "event stream ended"
            except ConveyorError as exc:
                self.error = f"{exc.code.connect_name}: {exc.message}"
            except Exception as exc:  # never let the feed die; the banner shows the reason
                log.warning("event stream failed: %s", exc)
                self.error = str(exc) or type(exc).__name__
            self.connected = False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
