"""Operator actions on tasks and queues (AdminService semantics), as synchronous engine calls.

Legal states follow the memory broker upstream: Cancel = waiting or AGGREGATING (ACTIVE asks the
worker via Cancel and archives on its RETRY/RELEASED); Delete = anything but ACTIVE; Run =
SCHEDULED/PENDING/RETRY/ARCHIVED; Reschedule = SCHEDULED/PENDING/RETRY; Archive =
SCHEDULED/PENDING/RETRY/BLOCKED. Unknown id -> NotFound; illegal state -> FailedPrecondition.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from conveyor_sdk.errors import FailedPrecondition, NotFound
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.limits import GroupConfig, TokenBucket
from conveyor_server_min._engine.model import State, Task
from conveyor_server_min._engine.sessions import CancelAction

__all__ = ["TASK_NOT_FOUND", "AdminOps", "QueueSummary"]

TASK_NOT_FOUND = "broker: task not found"
_CANCELABLE = frozenset({State.SCHEDULED, State.PENDING, State.RETRY, State.AGGREGATING, State.BLOCKED})
_RUNNABLE = frozenset({State.SCHEDULED, State.PENDING, State.RETRY, State.ARCHIVED})
_RESCHEDULABLE = frozenset({State.SCHEDULED, State.PENDING, State.RETRY})
_ARCHIVABLE = frozenset({State.SCHEDULED, State.PENDING, State.RETRY, State.BLOCKED})


@dataclass(frozen=True, slots=True)
class QueueSummary:
    name: str
    paused: bool
    counts: tuple[int, ...]  # indexed by State value (0 unused)


class AdminOps:
    """Admin operations over one :class:`Engine`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _task(self, task_id: str) -> Task:
        task = self.engine.broker.get(task_id)
        if task is None:
            raise NotFound(TASK_NOT_FOUND)
        return task

    @staticmethod
    def _illegal(task: Task, action: str) -> FailedPrecondition:
        return FailedPrecondition(f"task {task.id} is {task.state.name.lower()} and cannot be {action}")

    def _finish(self) -> None:
        self.engine.pump()

    # --- task actions ----------------------------------------------------------------------------
    def cancel(self, task_id: str, *, allow_active: bool = True) -> None:
        task = self._task(task_id)
        now = self.engine.now()
        if task.state is State.ACTIVE and allow_active:
            task.cancel_requested = True
            self.engine.broker.touch(task)
            session = self.engine.dispatcher.sessions.get(task.session_id)
            if session is not None:
                session.sink(CancelAction(task.id))
            return
        if task.state not in _CANCELABLE:
            raise self._illegal(task, "canceled")
        self.engine.transitions.move(task, State.CANCELED, now)
        self._finish()

    def delete(self, task_id: str) -> None:
        task = self._task(task_id)
        if task.state is State.ACTIVE:
            raise self._illegal(task, "deleted")
        self.engine.broker.delete(task)

    def run(self, task_id: str) -> None:
        task = self._task(task_id)
        if task.state not in _RUNNABLE:
            raise self._illegal(task, "run")
        now = self.engine.now()
        self.engine.transitions.move(task, State.PENDING, now, due=now)
        self._finish()

    def archive(self, task_id: str) -> None:
        task = self._task(task_id)
        if task.state not in _ARCHIVABLE:
            raise self._illegal(task, "archived")
        self.engine.transitions.move(task, State.ARCHIVED, self.engine.now())
        self._finish()

    def reschedule(self, task_id: str, at: int) -> None:
        task = self._task(task_id)
        if task.state not in _RESCHEDULABLE:
            raise self._illegal(task, "rescheduled")
        now = self.engine.now()
        task.process_at = at
        state = State.SCHEDULED if at > now else State.PENDING
        self.engine.transitions.move(task, state, now, due=at if at > now else now)
        self._finish()

    # --- queues ----------------------------------------------------------------------------------
    def set_paused(self, queue: str, paused: bool) -> None:
        self.engine.broker.set_paused(queue, paused)
        if not paused:
            self.engine.wake_due()
            self.engine.sweep_groups()

    def queues(self) -> list[QueueSummary]:
        broker = self.engine.broker
        counts = broker.counts()
        paused = broker.paused_queues()
        names = {q for q, c in counts.items() if any(c)} | paused
        return [
            QueueSummary(name, name in paused, tuple(counts.get(name, [0] * 10))) for name in sorted(names)
        ]

    def list_tasks(self, queue: str, state: int, limit: int, after: str) -> tuple[list[Task], str]:
        """Id-descending page of matching tasks and the next page token ('' when the page is short)."""
        out: list[Task] = []
        for task in self._iter_after(after):
            if (queue and task.queue != queue) or (state and task.state != state):
                continue
            out.append(task)
            if len(out) >= limit:
                return out, task.id
        return out, ""

    def _iter_after(self, after: str) -> Iterator[Task]:
        for task in self.engine.broker.iter_tasks_desc():
            if not after or task.id < after:
                yield task

    # --- limits and group configs ----------------------------------------------------------------
    def set_rate_limit(self, queue: str, rate: float, burst: int) -> None:
        self.engine.dispatcher.rate_limits[queue] = TokenBucket(rate, burst)
        self._wake(queue)

    def delete_rate_limit(self, queue: str) -> None:
        if self.engine.dispatcher.rate_limits.pop(queue, None) is not None:
            self._wake(queue)

    def rate_limits(self) -> list[tuple[str, float, int]]:
        limits = self.engine.dispatcher.rate_limits
        return [(q, b.rate, b.burst) for q, b in sorted(limits.items())]

    def set_concurrency_limit(self, queue: str, max_active: int) -> None:
        self.engine.dispatcher.key_limits[queue] = max_active
        self.engine.dispatcher.unpark_queue(queue)
        self._wake(queue)

    def delete_concurrency_limit(self, queue: str) -> None:
        if self.engine.dispatcher.key_limits.pop(queue, None) is not None:
            self.engine.dispatcher.unpark_queue(queue)
            self._wake(queue)

    def concurrency_limits(self) -> list[tuple[str, int]]:
        return sorted(self.engine.dispatcher.key_limits.items())

    def set_group_config(self, queue: str, group: str, cfg: GroupConfig) -> None:
        self.engine.group_configs[(queue, group)] = cfg

    def delete_group_config(self, queue: str, group: str) -> None:
        self.engine.group_configs.pop((queue, group), None)

    def group_configs(self) -> list[tuple[str, str, GroupConfig]]:
        return [(q, g, c) for (q, g), c in sorted(self.engine.group_configs.items())]

    def _wake(self, queue: str) -> None:
        self.engine.dispatcher.mark(queue)
        self.engine.pump()
