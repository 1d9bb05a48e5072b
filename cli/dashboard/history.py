"""The last hour, per minute, kept in this process: no metrics server is assumed.

Two sources, both already at hand: the dashboard's one ``WatchEvents`` stream (COMPLETED events
count as throughput; RETRIED and ARCHIVED as failures, i.e. failed attempts) and ``ListQueues``
(the waiting depth: scheduled + pending + retry + aggregating + blocked), sampled by the overview
and by a background sampler every ``SAMPLE_EVERY`` seconds.

Memory is bounded: ``MINUTES + 1`` buckets, each with at most ``MAX_QUEUES`` queues of three ints;
a queue beyond that is counted in the overall figures only. With the defaults that is at most
61 × 200 × 3 counters (about 5 MB of Python objects in the very worst case; a handful of queues
takes a few kB). History starts when the dashboard does and is lost when it stops.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from conveyor_sdk.client import TaskEvent, TaskEventType
from conveyor_sdk.types import QueueInfo, TaskState

__all__ = ["MINUTES", "History", "chart"]

MINUTES = 60
MAX_QUEUES = 200
SAMPLE_EVERY = 15.0
DEPTH_STATES = (
    TaskState.SCHEDULED,
    TaskState.PENDING,
    TaskState.RETRY,
    TaskState.AGGREGATING,
    TaskState.BLOCKED,
)
FAILED = {TaskEventType.RETRIED, TaskEventType.ARCHIVED}


@dataclass(slots=True)
class Bucket:
    """One minute: counts per queue (``""`` = every queue together) and the last depth seen."""

    minute: int
    done: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    depth: dict[str, int] = field(default_factory=dict)


class History:
    """Per-minute ring of throughput, failures and depth (``clock`` returns wall seconds)."""

    def __init__(self, clock: Any = time.time) -> None:
        self._clock = clock
        self._buckets: deque[Bucket] = deque(maxlen=MINUTES + 1)
        # Built charts per queue, valid while the minute and the data are unchanged (so ten tabs
        # polling an idle system re-use one rendering of the numbers).
        self._version = 0
        self._cache_key: tuple[int, int] = (-1, -1)
        self._cache: dict[str, Any] = {}

    def _bucket(self) -> Bucket:
        minute = int(self._clock() // 60)
        if not self._buckets or self._buckets[-1].minute != minute:
            self._buckets.append(Bucket(minute))
        return self._buckets[-1]

    @staticmethod
    def _bump(counts: dict[str, int], queue: str) -> None:
        counts[""] = counts.get("", 0) + 1
        if queue in counts or len(counts) <= MAX_QUEUES:
            counts[queue] = counts.get(queue, 0) + 1

    def event(self, event: TaskEvent) -> None:
        """Count one WatchEvents event."""
        if event.event_type is TaskEventType.COMPLETED:
            self._bump(self._bucket().done, event.queue)
            self._version += 1
        elif event.event_type in FAILED:
            self._bump(self._bucket().failed, event.queue)
            self._version += 1

    def depth(self, queues: Iterable[QueueInfo]) -> None:
        """Record the waiting depth of every queue (the newest sample of a minute wins)."""
        depth: dict[str, int] = {}
        for q in queues:
            n = sum(q.counts.get(s, 0) for s in DEPTH_STATES)
            depth[""] = depth.get("", 0) + n
            if len(depth) <= MAX_QUEUES:
                depth[q.name] = n
        bucket = self._bucket()
        if bucket.depth != depth:
            bucket.depth = depth
            self._version += 1

    def cached(self, queue: str, build: Callable[[dict[str, list[int | None]]], Any]) -> Any:
        """``build(self.series(queue))``, re-built only when the minute or the data changed."""
        key = (int(self._clock() // 60), self._version)
        if key != self._cache_key:
            self._cache, self._cache_key = {}, key
        if queue not in self._cache:
            if len(self._cache) >= MAX_QUEUES:
                return build(self.series(queue))
            self._cache[queue] = build(self.series(queue))
        return self._cache[queue]

    def series(self, queue: str = "") -> dict[str, list[int | None]]:
        """``MINUTES`` points, oldest first, for ``queue`` (``""`` = overall); depth None = no sample."""
        now = int(self._clock() // 60)
        by_minute = {b.minute: b for b in self._buckets}
        out: dict[str, list[int | None]] = {"done": [], "failed": [], "depth": []}
        for m in range(now - MINUTES + 1, now + 1):
            b = by_minute.get(m)
            out["done"].append(b.done.get(queue, 0) if b else 0)
            out["failed"].append(b.failed.get(queue, 0) if b else 0)
            out["depth"].append(b.depth.get(queue) if b and b.depth else None)
        return out


def chart(values: list[int | None], width: int = 600, height: int = 80) -> dict[str, Any]:
    """Polyline points (numbers only, so nothing to escape) and the peak, for an inline SVG."""
    known = [v for v in values if v is not None]
    peak = max(known, default=0)
    scale = (height - 4) / peak if peak else 0.0
    step = width / max(1, len(values) - 1)
    points = " ".join(
        f"{i * step:.1f},{height - 2 - v * scale:.1f}" for i, v in enumerate(values) if v is not None
    )
    end = points.rsplit(" ", 1)[-1].split(",") if points else None  # the newest point gets a dot
    return {
        "points": points,
        "end": end,
        "peak": peak,
        "last": known[-1] if known else None,
        "w": width,
        "h": height,
    }
