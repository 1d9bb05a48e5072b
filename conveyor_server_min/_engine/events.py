"""Lifecycle event fan-out for WatchEvents: bounded per-subscriber buffers, never blocking the engine."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from conveyor_server_min._engine.model import EventType, Task, TaskEvent

__all__ = ["EventHub", "Subscription"]

log = logging.getLogger("conveyor.server.events")


class Subscription:
    """One watcher: filters plus a bounded buffer; ``notify`` is called after each append."""

    def __init__(self, queues: frozenset[str], types: frozenset[int], limit: int = 10_000) -> None:
        self.queues = queues
        self.types = types
        self.buffer: deque[TaskEvent] = deque(maxlen=limit)
        self.notify: Callable[[], None] = lambda: None

    def wants(self, event: TaskEvent) -> bool:
        if self.queues and event.queue not in self.queues:
            return False
        return not self.types or int(event.event_type) in self.types


class EventHub:
    """Publishes :class:`TaskEvent` to subscribers; a no-op when nobody listens."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._subs: list[Subscription] = []

    @property
    def active(self) -> bool:
        return self.enabled and bool(self._subs)

    def subscribe(self, sub: Subscription) -> None:
        self._subs.append(sub)

    def unsubscribe(self, sub: Subscription) -> None:
        if sub in self._subs:
            self._subs.remove(sub)

    def publish(self, task: Task, event_type: EventType, now: int) -> None:
        event = TaskEvent(
            id=task.id,
            queue=task.queue,
            type=task.type,
            state=task.state,
            event_type=event_type,
            occurred_at=now,
            attempt=task.retried,
            last_error=task.last_error if event_type in (EventType.RETRIED, EventType.ARCHIVED) else "",
        )
        for sub in self._subs:
            if sub.wants(event):
                sub.buffer.append(event)
                sub.notify()
