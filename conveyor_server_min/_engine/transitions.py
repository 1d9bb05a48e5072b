"""State transitions with their side effects: events, dependency resolution, key counts.

Every state change of a task goes through :class:`Transitions`, which asks the
broker to apply it and then runs the consequences: lifecycle events, the
per-(queue, concurrency_key) active counts, waking the queue's dispatcher, and
resolving dependents when a task becomes terminal (§12 of server-behavior.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from conveyor_server_min._engine.backoff import backoff_delay, strategy_name
from conveyor_server_min._engine.broker import Broker
from conveyor_server_min._engine.clock import clamp, from_seconds
from conveyor_server_min._engine.events import EventHub
from conveyor_server_min._engine.metrics import EngineMetrics
from conveyor_server_min._engine.model import TERMINAL, EventType, FailurePolicy, Outcome, State, Task
from conveyor_server_min.service_api import EngineConfig

__all__ = ["Transitions"]

log = logging.getLogger("conveyor.server.engine")

_EVENT_FOR_STATE = {
    State.PENDING: EventType.ENQUEUED,
    State.SCHEDULED: EventType.SCHEDULED,
    State.ACTIVE: EventType.LEASED,
    State.COMPLETED: EventType.COMPLETED,
    State.RETRY: EventType.RETRIED,
    State.ARCHIVED: EventType.ARCHIVED,
    State.CANCELED: EventType.CANCELED,
}
LEASE_EXPIRED = "lease expired"
SESSION_SILENT = "session went silent"
MUTE_FREE = 10  # free silent releases per task from sessions that never spoke after their Hello
EXPIRED = "task expired before dispatch"
CASCADE_CANCELED = "canceled by failed dependency"


class Transitions:
    """Applies task state changes and their consequences."""

    def __init__(
        self,
        broker: Broker,
        config: EngineConfig,
        events: EventHub,
        rand: Callable[[], float],
    ) -> None:
        self.broker = broker
        self.config = config
        self.events = events
        self.rand = rand
        self.lease_ttl = from_seconds(config.lease_ttl)
        self.key_active: dict[tuple[str, str], int] = {}
        self.metrics = EngineMetrics()
        self.on_ready: Callable[[str], None] = lambda queue: None
        self.on_key_freed: Callable[[str, str], None] = lambda queue, key: None

    # --- the one primitive ------------------------------------------------------------------------
    def move(self, task: Task, state: State, now: int, *, due: int | None = None,
             event: EventType | None = None) -> None:  # fmt: skip
        """Change state, then run the consequences."""
        previous = task.state
        if due is not None:
            task.due = due
        if previous is State.ACTIVE and state is not State.ACTIVE:
            self._leave_active(task)
        if state in TERMINAL:
            task.completed_at = now
        elif previous in TERMINAL:
            task.completed_at = None
        self.broker.set_state(task, state, now)
        self.metrics.moved(task, previous, state, event, now)
        if state is State.ACTIVE and task.concurrency_key:
            key = (task.queue, task.concurrency_key)
            self.key_active[key] = self.key_active.get(key, 0) + 1
        self.emit(task, event or _EVENT_FOR_STATE.get(state), now)
        if state in (State.PENDING, State.RETRY):
            self.on_ready(task.queue)
        if state in TERMINAL:
            self.resolve_dependents(task, now)

    def emit(self, task: Task, event: EventType | None, now: int) -> None:
        if event is not None and self.events.active:
            self.events.publish(task, event, now)

    def _leave_active(self, task: Task) -> None:
        task.session_id = ""
        task.lease_expires_at = 0
        task.cancel_requested = False
        if task.concurrency_key:
            key = (task.queue, task.concurrency_key)
            count = self.key_active.get(key, 0) - 1
            if count > 0:
                self.key_active[key] = count
            else:
                self.key_active.pop(key, None)
            self.on_key_freed(task.queue, task.concurrency_key)

    # --- leasing ---------------------------------------------------------------------------------
    def activate(self, task: Task, session_id: str, lease_id: int, now: int) -> None:
        task.lease_id = lease_id
        task.session_id = session_id
        task.lease_expires_at = now + self.lease_ttl
        task.started_at = now
        task.progress = 0
        task.progress_message = ""
        task.cancel_requested = False
        self.move(task, State.ACTIVE, now)

    def release(self, task: Task, now: int) -> None:
        """Back to PENDING, due now, no retry charge."""
        self.move(task, State.PENDING, now, due=now, event=EventType.RELEASED)

    # --- outcomes --------------------------------------------------------------------------------
    def apply_outcome(self, task: Task, outcome: int, message: str, result: bytes, now: int) -> None:
        """The Result outcome table; ``task`` is ACTIVE under the reporting delivery's lease."""
        self.metrics.reported(task, outcome in (Outcome.RETRY, Outcome.SKIP_RETRY), now)
        if outcome == Outcome.SUCCESS:
            task.result = result
            self.move(task, State.COMPLETED, now)
        elif outcome == Outcome.RETRY:
            self._retry(task, message, now)
        elif outcome == Outcome.SKIP_RETRY:
            task.last_error = message
            self.move(task, State.ARCHIVED, now)
        elif task.cancel_requested:
            task.last_error = f"canceled by admin: {message}"
            self.move(task, State.ARCHIVED, now)
        else:
            self.release(task, now)

    def _retry(self, task: Task, message: str, now: int) -> None:
        if task.cancel_requested:
            task.last_error = f"canceled by admin: {message}"
            self.move(task, State.ARCHIVED, now)
        elif task.retried >= task.max_retry:
            task.last_error = f"retries exhausted: {message}"
            self.move(task, State.ARCHIVED, now)
        else:
            delay = self.backoff(task)
            task.retried += 1
            task.last_error = message
            self.move(task, State.RETRY, now, due=clamp(now + delay))

    def backoff(self, task: Task) -> int:
        """Delay in nanoseconds before the task's next attempt."""
        cfg = self.config
        strategy = cfg.retry_backoff_strategy
        base, cap = from_seconds(cfg.retry_backoff_base), from_seconds(cfg.retry_backoff_cap)
        policy = task.retry_policy
        if policy is not None:
            strategy = strategy_name(policy.strategy, strategy)
            base = policy.base if policy.base > 0 else base
            cap = policy.max if policy.max > 0 else cap
        return backoff_delay(strategy, base, cap, task.retried, self.rand)

    def lease_expired(self, task: Task, now: int, reason: str = LEASE_EXPIRED) -> None:
        """A lapsed lease: charged a retry (§5.6), due at once; not offered straight back to the
        session it lapsed in (``Dispatcher.declines``)."""
        task.lapsed_in, task.lapsed_at = task.session_id, now
        task.last_error = reason
        if task.retried >= task.max_retry:
            self.move(task, State.ARCHIVED, now)
        else:
            task.retried += 1
            self.move(task, State.RETRY, now, due=now)

    def silenced(self, task: Task, now: int, spoke: bool = True) -> None:
        """A task of a session closed for silence: released with no charge, as on any close
        (§5.10). A task that was already released that way once is charged instead, as for a
        lapsed lease: a task that freezes every worker it reaches must still meet its retry bound
        (the poison-pill bound of §5.10), while one partitioned worker costs it nothing.

        ``spoke``: the session sent a frame after its Hello. One that never did may never have got
        its Welcome (a link that loses server-to-worker bytes lets each reconnect's Hello through,
        and each new session is fed the task again), so its silence says little about the task:
        free, up to ``MUTE_FREE`` times per task; beyond that a task that freezes every fresh worker
        before its first Heartbeat still meets the poison-pill bound."""
        if not spoke and task.mute_releases < MUTE_FREE:
            task.mute_releases += 1
            task.silent_releases = max(task.silent_releases, 1)
            task.last_error = SESSION_SILENT
            self.release(task, now)
        elif task.silent_releases:
            self.lease_expired(task, now, SESSION_SILENT)
        else:
            task.silent_releases = 1
            task.last_error = SESSION_SILENT  # not charged, but an operator (and the suite) can see why
            self.release(task, now)

    def expire(self, task: Task, now: int) -> None:
        task.last_error = EXPIRED
        self.move(task, State.ARCHIVED, now)

    # --- dependencies ----------------------------------------------------------------------------
    def settle_initial(self, task: Task, now: int) -> State:
        """Resolve ``depends_on`` at enqueue; returns the initial state (and sets ``task.due``)."""
        for dep in task.depends_on:
            if dep.task_id == task.id or dep.task_id in task.waiting_on:
                continue
            prereq = self.broker.get(dep.task_id)
            policy = dep.on_failure if dep.on_failure else FailurePolicy.BLOCK
            if prereq is not None and prereq.state is State.COMPLETED:
                continue
            if prereq is not None and prereq.state in (State.ARCHIVED, State.CANCELED):
                if policy is FailurePolicy.CONTINUE:
                    continue
                if policy is FailurePolicy.CASCADE_CANCEL:
                    task.waiting_on.clear()
                    task.last_error = CASCADE_CANCELED
                    task.completed_at = now
                    return State.CANCELED
            task.waiting_on[dep.task_id] = policy
        if task.waiting_on:
            return State.BLOCKED
        return self.ready_state(task, now)

    def ready_state(self, task: Task, now: int) -> State:
        """State of a task with no open dependency edges; sets ``task.due``."""
        if task.group:
            return State.AGGREGATING
        if task.process_at is not None and task.process_at > now:
            task.due = task.process_at
            return State.SCHEDULED
        task.due = task.process_at if task.process_at is not None else now
        return State.PENDING

    def resolve_dependents(self, prereq: Task, now: int) -> None:
        dependents = self.broker.pop_dependents(prereq.id)
        keep: set[str] = set()
        for dep_id in sorted(dependents):
            task = self.broker.get(dep_id)
            if task is None or task.state is not State.BLOCKED or prereq.id not in task.waiting_on:
                continue
            policy = task.waiting_on[prereq.id]
            if prereq.state is State.COMPLETED or policy is FailurePolicy.CONTINUE:
                del task.waiting_on[prereq.id]
                if not task.waiting_on:
                    self.move(task, self.ready_state(task, now), now)
                else:
                    self.broker.touch(task)
            elif policy is FailurePolicy.CASCADE_CANCEL:
                task.last_error = CASCADE_CANCELED
                self.move(task, State.CANCELED, now)
            else:
                keep.add(dep_id)
        for dep_id in keep:
            self.broker.add_dependent(prereq.id, dep_id)
