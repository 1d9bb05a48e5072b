"""Worker-session state inside the engine: deliveries, capacity, outbound actions.

A *delivery* is one concurrency slot: a single Dispatch, or one BatchDispatch
with several members. ``free`` = concurrency - open deliveries, so a session
never has more than ``concurrency`` deliveries outstanding in total across all
its queues. A delivery stays open until its Result/BatchResult arrives, the
stream closes, or its leases were lost and the worker stops mentioning it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from conveyor_server_min._engine.model import Task

__all__ = [
    "Action",
    "BatchAction",
    "CancelAction",
    "CloseAction",
    "Delivery",
    "DispatchAction",
    "SessionState",
    "swrr_pick",
]


@dataclass(frozen=True, slots=True)
class DispatchAction:
    """Send one leased task."""

    task: Task
    deadline: int


@dataclass(frozen=True, slots=True)
class BatchAction:
    """Send one fired group as a BatchDispatch."""

    tasks: tuple[Task, ...]
    deadline: int
    group: str


@dataclass(frozen=True, slots=True)
class CancelAction:
    """Ask the worker to stop a task."""

    task_id: str


@dataclass(frozen=True, slots=True)
class CloseAction:
    """End the session's stream (the engine already released its tasks and forgot it)."""

    reason: str


Action = DispatchAction | BatchAction | CancelAction | CloseAction


@dataclass(slots=True, eq=False)
class Delivery:
    """One outstanding slot: member task id -> the lease id it was granted under."""

    id: int
    members: dict[str, int]
    batch: bool = False
    cancel_sent: set[str] = field(default_factory=set)


@dataclass(slots=True, eq=False)
class SessionState:
    """One connected worker session as the engine sees it."""

    id: str
    queues: Mapping[str, int]
    concurrency: int
    sink: Callable[[Action], None]
    connected_at: int
    sdk_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    batch_types: frozenset[str] = frozenset()
    deliveries: dict[int, Delivery] = field(default_factory=dict)
    by_task: dict[str, Delivery] = field(default_factory=dict)
    queue_swrr: dict[str, int] = field(default_factory=dict)
    work: dict[str, None] = field(default_factory=dict)  # own queues that may hold ready tasks
    dispatched: int = 0
    last_heard: int = 0  # when the worker last sent a frame (the Hello, at first)
    spoke: bool = False  # it sent a frame after its Hello: it got the Welcome and is serving
    busy_since: int = 0  # when its first open delivery opened (its silence clock starts no earlier)

    @property
    def quiet_since(self) -> int:
        """Start of the silence that counts: the last frame, or the first lease if that came later."""
        return max(self.last_heard, self.busy_since)

    @property
    def free(self) -> int:
        return self.concurrency - len(self.deliveries)

    def add(self, delivery: Delivery, now: int) -> None:
        """Open a delivery; an older delivery of the same task (a lost lease) is superseded."""
        if not self.deliveries:
            self.busy_since = now
        self.deliveries[delivery.id] = delivery
        for task_id in delivery.members:
            old = self.by_task.get(task_id)
            if old is not None and old is not delivery:
                self.forget_member(old, task_id)
            self.by_task[task_id] = delivery
        self.dispatched += 1

    def forget_member(self, delivery: Delivery, task_id: str) -> None:
        """Drop one member; the slot frees when the last member goes."""
        delivery.members.pop(task_id, None)
        if self.by_task.get(task_id) is delivery:
            del self.by_task[task_id]
        if not delivery.members:
            self.deliveries.pop(delivery.id, None)

    def remove(self, delivery: Delivery) -> None:
        for task_id in list(delivery.members):
            self.forget_member(delivery, task_id)
        self.deliveries.pop(delivery.id, None)

    def __repr__(self) -> str:
        return (
            f"SessionState(id={self.id!r}, queues={dict(self.queues)!r}, "
            f"concurrency={self.concurrency}, outstanding={len(self.deliveries)})"
        )


def swrr_pick(current: dict[str, int], candidates: list[tuple[str, int]]) -> str:
    """One step of smooth weighted round-robin over ``candidates`` (key, weight).

    Each candidate's running value grows by its weight (<= 0 counts as 1); the
    highest wins (first listed on ties) and pays back the total weight.
    """
    total = 0
    best = ""
    best_value: int | None = None
    for key, weight in candidates:
        step = weight if weight > 0 else 1
        value = current.get(key, 0) + step
        current[key] = value
        total += step
        if best_value is None or value > best_value:
            best, best_value = key, value
    current[best] -= total
    return best
