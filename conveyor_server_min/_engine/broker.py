"""Task storage behind a small interface, plus the in-memory implementation.

The broker owns task rows and every index over them (ready heaps, timers,
unique claims, per-state counts, aggregation buckets, dependency edges). It
applies state changes it is told to make and never decides *which* change to
make: the rules live in the engine. A persistent broker implements the same
:class:`Broker` protocol.

Indexes use lazy deletion: every state change bumps ``task.token`` and heap
entries carrying an old token are skipped when they surface.

Times: every ``now`` and every instant on a :class:`Task` is an ``int`` of
nanoseconds since the epoch (:mod:`.clock`); a persistent broker must store them
exactly (they exceed 64 bits at the ends of the Timestamp range).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from conveyor_server_min._engine.model import INCOMPLETE, WAITING, State, Task

__all__ = ["Broker", "GroupBucket", "MemoryBroker"]

_DISPATCHABLE = (State.PENDING, State.RETRY)


@dataclass(slots=True)
class GroupBucket:
    """Members of one (queue, group) in arrival order, with arrival times."""

    queue: str
    group: str
    members: dict[str, int] = field(default_factory=dict)
    last_at: int = 0

    @property
    def first_at(self) -> int:
        return next(iter(self.members.values()), self.last_at)


class Broker(Protocol):
    """What the engine needs from storage.

    Every ``now`` and every time on a :class:`Task` is ``int`` nanoseconds (:mod:`.clock`).
    Cost contract the dispatcher relies on: ``peek_ready`` / ``pop_ready`` / ``next_timer`` must not
    scan queues (they run once per dispatch); ``queues_with_due_work`` runs on timer passes and may
    cost in proportion to the queues holding waiting tasks. ``queues_with_due_work(now)`` answers the
    queues that have a task ready at ``now`` (moving due delayed tasks into the ready index), and
    after it ``next_timer()`` reports only instants after ``now``.
    """

    driver: str

    def get(self, task_id: str) -> Task | None: ...
    def insert(self, task: Task, now: int) -> None: ...
    def delete(self, task: Task) -> None: ...
    def set_state(self, task: Task, state: State, now: int) -> None: ...
    def touch(self, task: Task) -> None: ...
    def unique_holder(self, key: str, now: int) -> Task | None: ...
    def peek_ready(self, queue: str, now: int) -> Task | None: ...
    def pop_ready(self, queue: str, now: int) -> Task | None: ...
    def requeue(self, task: Task, now: int) -> None: ...
    def pop_due_scheduled(self, now: int, limit: int) -> list[Task]: ...
    def pop_expired(self, now: int) -> list[Task]: ...
    def pop_purgeable(self, now: int) -> list[Task]: ...
    def active_tasks(self) -> Iterable[Task]: ...
    def next_timer(self) -> int | None: ...
    def queues_with_due_work(self, now: int) -> list[str]: ...
    def compact(self) -> int: ...
    def counts(self) -> dict[str, list[int]]: ...
    def iter_tasks_desc(self) -> Iterator[Task]: ...
    def buckets(self) -> list[GroupBucket]: ...
    def bucket(self, queue: str, group: str) -> GroupBucket | None: ...
    def add_dependent(self, prerequisite: str, dependent: str) -> None: ...
    def pop_dependents(self, prerequisite: str) -> set[str]: ...
    def is_paused(self, queue: str) -> bool: ...
    def set_paused(self, queue: str, paused: bool) -> None: ...
    def paused_queues(self) -> set[str]: ...
    def size(self) -> int: ...


class MemoryBroker:
    """Everything in process memory; lost on restart."""

    driver = "memory"

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._counts: dict[str, list[int]] = {}
        self._ready: dict[str, list[tuple[int, int, str, int]]] = {}
        self._delayed: dict[str, list[tuple[int, str, int]]] = {}
        self._scheduled: list[tuple[int, str, int]] = []
        self._expiring: list[tuple[int, str]] = []
        self._purge: list[tuple[int, str, int]] = []
        self._timers: list[tuple[int, str]] = []
        self.timers_added = 0  # entries pushed on _timers so far (the engine tells its timer loop)
        self._active: dict[str, Task] = {}
        self._unique: dict[str, str] = {}
        self._buckets: dict[tuple[str, str], GroupBucket] = {}
        self._dependents: dict[str, set[str]] = {}
        self._paused: set[str] = set()
        self._sorted_ids: list[str] | None = []

    def __repr__(self) -> str:
        return f"MemoryBroker(tasks={len(self._tasks)}, active={len(self._active)})"

    # --- rows -------------------------------------------------------------------------------------
    def get(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)

    def size(self) -> int:
        return len(self._tasks)

    def insert(self, task: Task, now: int) -> None:
        """Store a new row in ``task.state`` and claim its unique key."""
        self._tasks[task.id] = task
        self._sorted_ids = None
        self._counts.setdefault(task.queue, [0] * 10)[task.state] += 1
        if task.unique_key and task.state in INCOMPLETE:
            self._unique[task.unique_key] = task.id
        if task.expires_at is not None:
            heapq.heappush(self._expiring, (task.expires_at, task.id))
        self._enter(task, now)

    def delete(self, task: Task) -> None:
        self._leave(task)
        self._counts[task.queue][task.state] -= 1
        del self._tasks[task.id]
        self._sorted_ids = None
        if task.unique_key and self._unique.get(task.unique_key) == task.id:
            del self._unique[task.unique_key]
        task.token += 1

    def set_state(self, task: Task, state: State, now: int) -> None:
        """Move ``task`` to ``state``; ``task.due`` must already hold its new due time."""
        self._leave(task)
        counts = self._counts[task.queue]
        counts[task.state] -= 1
        counts[state] += 1
        task.state = state
        task.token += 1
        if state not in INCOMPLETE and task.unique_key and self._unique.get(task.unique_key) == task.id:
            del self._unique[task.unique_key]
        self._enter(task, now)

    def _enter(self, task: Task, now: int) -> None:
        state = task.state
        if state in _DISPATCHABLE:
            self.requeue(task, now)
        elif state is State.SCHEDULED:
            heapq.heappush(self._scheduled, (task.due, task.id, task.token))
        elif state is State.ACTIVE:
            self._active[task.id] = task
        elif state is State.AGGREGATING:
            key = (task.queue, task.group)
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = GroupBucket(task.queue, task.group)
            bucket.members[task.id] = now
            bucket.last_at = now
        elif state is State.COMPLETED:
            done = task.completed_at if task.completed_at is not None else now
            purge_at = done + (task.retention or 0)
            heapq.heappush(self._purge, (purge_at, task.id, task.token))

    def _leave(self, task: Task) -> None:
        if task.state is State.ACTIVE:
            self._active.pop(task.id, None)
        elif task.state is State.AGGREGATING:
            key = (task.queue, task.group)
            bucket = self._buckets.get(key)
            if bucket is not None:
                bucket.members.pop(task.id, None)
                if not bucket.members:
                    del self._buckets[key]

    def touch(self, task: Task) -> None:
        """Note a field change made without a state change (a durable broker persists it)."""

    def unique_holder(self, key: str, now: int) -> Task | None:
        holder_id = self._unique.get(key)
        holder = self._tasks.get(holder_id) if holder_id else None
        if holder is None or holder.state not in INCOMPLETE:
            return None
        if holder.unique_until is not None and holder.unique_until <= now:
            return None
        return holder

    # --- dispatch index --------------------------------------------------------------------------
    # Per queue: a ready heap (-priority, due, id, token) and a delayed heap (due, id, token). Empty
    # heaps are dropped, so every per-queue scan costs in proportion to queues that hold entries. One
    # global timer heap (due, queue) finds the earliest delayed entry without scanning queues.
    def requeue(self, task: Task, now: int) -> None:
        """(Re)index a PENDING/RETRY task: ready if due, else delayed."""
        task.token += 1
        if task.due <= now:
            heap = self._ready.setdefault(task.queue, [])
            heapq.heappush(heap, (-task.priority, task.due, task.id, task.token))
        else:
            delayed = self._delayed.setdefault(task.queue, [])
            heapq.heappush(delayed, (task.due, task.id, task.token))
            heapq.heappush(self._timers, (task.due, task.queue))
            self.timers_added += 1

    def _valid(self, task_id: str, token: int) -> Task | None:
        task = self._tasks.get(task_id)
        if task is not None and task.token == token and task.state in _DISPATCHABLE:
            return task
        return None

    def _promote_delayed(self, queue: str, now: int) -> None:
        delayed = self._delayed.get(queue)
        if not delayed or delayed[0][0] > now:
            return
        ready = self._ready.setdefault(queue, [])
        while delayed and delayed[0][0] <= now:
            due, task_id, token = heapq.heappop(delayed)
            task = self._valid(task_id, token)
            if task is not None:
                heapq.heappush(ready, (-task.priority, due, task_id, token))
        if not delayed:
            del self._delayed[queue]
        if not ready:
            del self._ready[queue]

    def peek_ready(self, queue: str, now: int) -> Task | None:
        self._promote_delayed(queue, now)
        heap = self._ready.get(queue)
        if heap is None:
            return None
        while heap:
            _, _, task_id, token = heap[0]
            task = self._valid(task_id, token)
            if task is not None:
                return task
            heapq.heappop(heap)
        del self._ready[queue]
        return None

    def pop_ready(self, queue: str, now: int) -> Task | None:
        task = self.peek_ready(queue, now)
        if task is not None:
            heap = self._ready[queue]
            heapq.heappop(heap)
            if not heap:
                del self._ready[queue]
            task.token += 1
        return task

    def compact(self) -> int:
        """Drop stale heap entries where they outnumber live ones; returns how many were dropped."""
        return self._compact(self._ready) + self._compact(self._delayed)

    def _compact(self, index: dict[str, list[Any]]) -> int:
        dropped = 0
        for queue, heap in list(index.items()):
            counts = self._counts.get(queue, [0] * 10)
            live = counts[State.PENDING] + counts[State.RETRY]
            if len(heap) <= 2 * live + 64:
                continue
            keep = [e for e in heap if self._valid(e[-2], e[-1]) is not None]
            dropped += len(heap) - len(keep)
            heapq.heapify(keep)
            if keep:
                heap[:] = keep
            else:
                del index[queue]
        return dropped

    def queues_with_due_work(self, now: int) -> list[str]:
        """Queues with a task ready at ``now``; due delayed entries move to their ready heaps first."""
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, queue = heapq.heappop(timers)
            self._promote_delayed(queue, now)
        return list(self._ready)

    def next_timer(self) -> int | None:
        """Earliest instant at which a delayed PENDING/RETRY task becomes due (SCHEDULED ones wait
        for the promoter)."""
        timers = self._timers
        while timers:
            due, queue = timers[0]
            delayed = self._delayed.get(queue)
            if delayed and delayed[0][0] <= due:
                return due
            heapq.heappop(timers)  # that entry already moved to the ready heap
        return None

    # --- timers ---------------------------------------------------------------------------------
    def pop_due_scheduled(self, now: int, limit: int) -> list[Task]:
        out: list[Task] = []
        heap = self._scheduled
        while heap and heap[0][0] <= now and len(out) < limit:
            _, task_id, token = heapq.heappop(heap)
            task = self._tasks.get(task_id)
            if task is not None and task.token == token and task.state is State.SCHEDULED:
                out.append(task)
        return out

    def pop_expired(self, now: int) -> list[Task]:
        out: list[Task] = []
        while self._expiring and self._expiring[0][0] <= now:
            _, task_id = heapq.heappop(self._expiring)
            task = self._tasks.get(task_id)
            if task is not None and task.state in WAITING:
                out.append(task)
        return out

    def pop_purgeable(self, now: int) -> list[Task]:
        out: list[Task] = []
        while self._purge and self._purge[0][0] <= now:
            _, task_id, token = heapq.heappop(self._purge)
            task = self._tasks.get(task_id)
            if task is not None and task.token == token and task.state is State.COMPLETED:
                out.append(task)
        return out

    def active_tasks(self) -> Iterable[Task]:
        return list(self._active.values())

    # --- views ----------------------------------------------------------------------------------
    def counts(self) -> dict[str, list[int]]:
        return {q: list(c) for q, c in self._counts.items()}

    def iter_tasks_desc(self) -> Iterator[Task]:
        if self._sorted_ids is None:
            self._sorted_ids = sorted(self._tasks, reverse=True)
        for task_id in list(self._sorted_ids):
            task = self._tasks.get(task_id)
            if task is not None:
                yield task

    def buckets(self) -> list[GroupBucket]:
        return list(self._buckets.values())

    def bucket(self, queue: str, group: str) -> GroupBucket | None:
        return self._buckets.get((queue, group))

    # --- dependencies and queues -----------------------------------------------------------------
    def add_dependent(self, prerequisite: str, dependent: str) -> None:
        self._dependents.setdefault(prerequisite, set()).add(dependent)

    def pop_dependents(self, prerequisite: str) -> set[str]:
        return self._dependents.pop(prerequisite, set())

    def is_paused(self, queue: str) -> bool:
        return queue in self._paused

    def set_paused(self, queue: str, paused: bool) -> None:
        if paused:
            self._paused.add(queue)
        else:
            self._paused.discard(queue)

    def paused_queues(self) -> set[str]:
        return set(self._paused)
