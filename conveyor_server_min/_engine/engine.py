"""The engine facade: producer, worker-session and maintenance entry points.

All methods are synchronous and take "now" from the injected clock; the async
services layer calls them and forwards the resulting session actions. Admin
operations live in :mod:`conveyor_server_min._engine.admin`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

from conveyor_sdk.errors import AlreadyExists
from conveyor_server_min._engine.broker import Broker, GroupBucket, MemoryBroker
from conveyor_server_min._engine.clock import Clock, SystemClock, from_seconds, to_seconds
from conveyor_server_min._engine.dispatcher import Dispatcher
from conveyor_server_min._engine.events import EventHub
from conveyor_server_min._engine.limits import GroupConfig
from conveyor_server_min._engine.metrics import Gauges, render
from conveyor_server_min._engine.model import EventType, Outcome, State, Task
from conveyor_server_min._engine.sessions import Action, CancelAction, CloseAction, Delivery, SessionState
from conveyor_server_min._engine.transitions import Transitions
from conveyor_server_min._engine.ulid import UlidGenerator
from conveyor_server_min.service_api import EngineConfig

__all__ = ["DUPLICATE_UNIQUE", "Engine"]

log = logging.getLogger("conveyor.server.engine")
R = TypeVar("R")

DUPLICATE_UNIQUE = "broker: duplicate task"
_ENQUEUE_EVENT = {State.PENDING: EventType.ENQUEUED, State.SCHEDULED: EventType.SCHEDULED}


class Engine:
    """Task lifecycle rules over a :class:`Broker`, with injectable clock and randomness."""

    def __init__(
        self,
        config: EngineConfig | None = None,
        *,
        clock: Clock | None = None,
        broker: Broker | None = None,
        rand: Callable[[], float] | None = None,
    ) -> None:
        self.config = config or EngineConfig()
        self.clock = clock or SystemClock()
        self.broker: Broker = broker or MemoryBroker()
        self.ids = UlidGenerator(self.clock)
        self.events = EventHub(self.config.events_enabled)
        self.transitions = Transitions(self.broker, self.config, self.events, rand or random.random)
        self.dispatcher = Dispatcher(self.broker, self.clock, self.config, self.transitions)
        self.group_configs: dict[tuple[str, str], GroupConfig] = {}
        self.started_at = self.clock.now()
        self.heartbeat_interval = from_seconds(self.config.lease_ttl) // 3  # as the Welcome announces
        self.silence_bound = round(self.heartbeat_interval * self.config.silent_session_intervals)
        self.on_timer_change: Callable[[], None] = lambda: None
        self._timers_told: tuple[int, int | None] = (-1, None)  # see pump
        self._grown: list[Task] = []  # AGGREGATING tasks committed since the last _after_commit
        for queue in self.broker.queues_with_due_work(self.started_at):  # rows a store already holds
            self.dispatcher.mark(queue)

    def __repr__(self) -> str:
        return f"Engine(broker={self.broker!r}, dispatcher={self.dispatcher!r})"

    def now(self) -> int:
        return self.clock.now()

    def metrics_text(self) -> str:
        """The Prometheus exposition of the engine's series (see ``_engine/metrics.py``)."""
        counts = self.broker.counts()
        active = sum(c[State.ACTIVE] for c in counts.values())
        pending = {queue: c[State.PENDING] for queue, c in counts.items()}
        gauges = Gauges(active=active, sessions=len(self.dispatcher.sessions), pending=pending)
        return render(self.transitions.metrics, gauges)

    def new_id(self, now: int | None = None) -> str:
        return self.ids.new(now)

    # --- producer --------------------------------------------------------------------------------
    def get(self, task_id: str) -> Task | None:
        return self.broker.get(task_id)

    @overload
    def enqueue(self, task: Task, *, now: int | None = None) -> Task: ...
    @overload
    def enqueue(self, task: Task, view: Callable[[Task], R], *, now: int | None = None) -> R: ...
    def enqueue(
        self, task: Task, view: Callable[[Task], Any] | None = None, *, now: int | None = None
    ) -> Any:
        """Commit one validated task; raises AlreadyExists for a repeat id or a held unique key.

        ``view`` (e.g. the TaskInfo encoder) sees the task as committed, in its initial state, before
        anything is dispatched (protocol §6.1); without it the live task object is returned.
        ``view`` runs after the dispatch, so that encoding the reply does not delay a Dispatch to an
        idle worker: on a :meth:`~Task.snapshot` taken before it when the dispatch may change the
        task (a session serving its queue has a free slot, or it joined a group), else on the task.
        ``now``: the caller's reading of the engine's clock, taken just before (one read per call).
        """
        if now is None:
            now = self.clock.now()
        if self.broker.get(task.id) is not None:
            raise AlreadyExists(f"task {task.id} already exists")
        if task.unique_key:
            self._check_unique([task], now)
        self._commit(task, now)
        if view is None:
            self._after_commit(now)
            return task
        changeable = task.group or self.dispatcher.may_take(task.queue)  # by the dispatch below
        committed = task.snapshot() if changeable else task
        self._after_commit(now)
        return view(committed)

    @overload
    def enqueue_tx(self, tasks: Sequence[Task]) -> list[Task]: ...
    @overload
    def enqueue_tx(self, tasks: Sequence[Task], view: Callable[[Task], R]) -> list[R]: ...
    def enqueue_tx(self, tasks: Sequence[Task], view: Callable[[Task], Any] | None = None) -> list[Any]:
        """Commit all or nothing. Existing / repeated ids are no-ops that return the stored task.

        ``view`` sees every task as it was after the commit and before any dispatch, as for
        :meth:`enqueue`.
        """
        now = self.now()
        fresh: list[Task] = []
        seen: dict[str, Task] = {}
        out: list[Task] = []
        for task in tasks:
            existing = self.broker.get(task.id) or seen.get(task.id)
            if existing is None:
                seen[task.id] = task
                fresh.append(task)
            out.append(existing or task)
        self._check_unique(fresh, now)
        for task in fresh:
            self._commit(task, now)
        committed = out if view is None else [task.snapshot() for task in out]
        self._after_commit(now)
        return committed if view is None else [view(task) for task in committed]

    def _check_unique(self, tasks: Iterable[Task], now: int) -> None:
        claimed: set[str] = set()
        for task in tasks:
            key = task.unique_key
            if not key:
                continue
            if key in claimed or self.broker.unique_holder(key, now) is not None:
                raise AlreadyExists(DUPLICATE_UNIQUE)
            claimed.add(key)

    def _commit(self, task: Task, now: int) -> None:
        task.enqueued_at = now
        if task.unique_key and task.unique_ttl is not None:
            task.unique_until = now + task.unique_ttl
        task.state = self.transitions.settle_initial(task, now)
        self.broker.insert(task, now)
        for prereq in task.waiting_on:
            self.broker.add_dependent(prereq, task.id)
        self.transitions.metrics.enqueued()
        self.transitions.emit(task, _ENQUEUE_EVENT.get(task.state), now)
        if task.state in (State.PENDING, State.RETRY):
            self.dispatcher.mark(task.queue)
        elif task.state is State.AGGREGATING:
            self._grown.append(task)

    def _after_commit(self, now: int) -> None:
        """Fire groups the commit filled up, then dispatch (after the caller took its reply)."""
        grown, self._grown = self._grown, []
        for task in grown:
            self._maybe_fire_full(task, now)
        self.pump(now)

    # --- worker sessions -------------------------------------------------------------------------
    def open_session(
        self,
        *,
        queues: Mapping[str, int],
        concurrency: int,
        sink: Callable[[Action], None],
        sdk_version: str = "",
        labels: Mapping[str, str] | None = None,
        batch_types: Iterable[str] = (),
        session_id: str | None = None,
    ) -> SessionState:
        session = SessionState(
            id=session_id or self.new_id(),
            queues=dict(queues),
            concurrency=concurrency,
            sink=sink,
            connected_at=self.now(),
            sdk_version=sdk_version,
            labels=dict(labels or {}),
            batch_types=frozenset(batch_types),
        )
        session.last_heard = session.connected_at
        self.dispatcher.register(session)
        return session

    def start_session(self, session: SessionState) -> None:
        """Begin dispatching to a registered session (after its Welcome went out)."""
        self.dispatcher.mark_session(session)
        self.pump()

    def close_session(self, session: SessionState) -> None:
        """Release every task still leased to the session (no retry charge), then forget it."""
        self._close(session, self.transitions.release)

    def _close(self, session: SessionState, release: Callable[[Task, int], None]) -> None:
        if session.id not in self.dispatcher.sessions:
            return
        self.dispatcher.unregister(session)
        now = self.now()
        for delivery in list(session.deliveries.values()):
            for task_id, lease_id in list(delivery.members.items()):
                task = self._leased(task_id, lease_id)
                if task is not None:
                    release(task, now)
            session.remove(delivery)
        self.pump()

    def heard(self, session: SessionState) -> None:
        """The worker sent a frame (any kind): it is alive, and its silence clock restarts."""
        session.last_heard = self.now()
        session.spoke = True

    def close_silent(self) -> int:
        """Close every session that holds deliveries and sent nothing for ``silence_bound``.

        Such a worker is gone or cut off (a partition, a dead NAT entry, a frozen process): it must
        heartbeat every interval while it holds a task (§5.6). Its stream is ended (a
        :class:`CloseAction` to its sink) and its tasks released as on any close (§5.10), so the
        server stops feeding it and the work moves on without waiting for the leases to lapse.
        Runs before every lease-expiry pass (see ``Ticker``), which makes a silent session's close
        win over its leases' lapse. Returns how many sessions it closed.
        """
        bound = self.silence_bound
        if bound <= 0:
            return 0
        now = self.now()
        silent = [
            s for s in self.dispatcher.sessions.values() if s.deliveries and now - s.quiet_since >= bound
        ]
        for session in silent:
            quiet = to_seconds(now - session.quiet_since)
            log.warning("session %s sent nothing for %.1fs holding tasks; closing it", session.id, quiet)
            reason = (
                f"session closed by the server: nothing received for {quiet:.1f}s while holding tasks "
                f"(heartbeat interval {to_seconds(self.heartbeat_interval):g}s)"
            )
            spoke = session.spoke
            self._close(session, lambda task, now, spoke=spoke: self.transitions.silenced(task, now, spoke))
            session.sink(CloseAction(reason))
        return len(silent)

    def _leased(self, task_id: str, lease_id: int) -> Task | None:
        task = self.broker.get(task_id)
        if task is not None and task.state is State.ACTIVE and task.lease_id == lease_id:
            return task
        return None

    def result(self, session: SessionState, task_id: str, outcome: int, message: str, data: bytes) -> None:
        """One Result; unknown ids are ignored. UNSPECIFIED acts as RELEASED."""
        delivery = session.by_task.get(task_id)
        if delivery is None:
            return
        now = self.clock.now()
        self._apply(session, delivery, (task_id, outcome, message, data), now)
        self.dispatcher.mark_session(session)
        self.pump(now)

    def batch_result(self, session: SessionState, results: Sequence[tuple[str, int, str, bytes]]) -> None:
        """A BatchResult: members omitted from ``results`` are RELEASED; one slot is refunded per batch."""
        touched: dict[int, Delivery] = {}
        now = self.clock.now()
        for report in results:
            delivery = session.by_task.get(report[0])
            if delivery is None:
                continue
            touched[delivery.id] = delivery
            self._apply(session, delivery, report, now)
        for delivery in touched.values():
            for task_id in list(delivery.members):
                self._apply(session, delivery, (task_id, Outcome.RELEASED, "", b""), now)
            session.remove(delivery)
        self.dispatcher.mark_session(session)
        self.pump(now)

    def _apply(
        self, session: SessionState, delivery: Delivery, report: tuple[str, int, str, bytes], now: int
    ) -> None:
        task_id, outcome, message, data = report
        task = self._leased(task_id, delivery.members[task_id])
        session.forget_member(delivery, task_id)
        if task is not None:
            self.transitions.apply_outcome(task, outcome, message, data, now)

    def heartbeat(self, session: SessionState, task_ids: Sequence[str]) -> None:
        """Extend listed leases; Cancel listed tasks whose lease was lost; drop lost unlisted ones."""
        now = self.now()
        listed = set(task_ids)
        for task_id in listed:
            delivery = session.by_task.get(task_id)
            if delivery is None:
                continue
            task = self._leased(task_id, delivery.members[task_id])
            if task is not None:
                task.lease_expires_at = now + self.transitions.lease_ttl
            elif task_id not in delivery.cancel_sent:
                delivery.cancel_sent.add(task_id)
                session.sink(CancelAction(task_id))
        for delivery in list(session.deliveries.values()):
            for task_id, lease_id in list(delivery.members.items()):
                if task_id not in listed and self._leased(task_id, lease_id) is None:
                    session.forget_member(delivery, task_id)
        # Always look for work: a slot may have freed, and a task whose lease lapsed here waits for a
        # sign of life from this session when no other session can take it (Dispatcher.declines).
        self.dispatcher.mark_session(session)
        self.pump()

    def credit(self, session: SessionState, n: int) -> None:
        """Restore up to ``n`` slots held by deliveries whose leases were all lost (never above capacity)."""
        restored = 0
        for delivery in list(session.deliveries.values()):
            if restored >= n:
                break
            if all(self._leased(t, lease) is None for t, lease in delivery.members.items()):
                session.remove(delivery)
                restored += 1
        self.dispatcher.mark_session(session)
        self.pump()

    def progress(self, session: SessionState, task_id: str, percent: int, message: str) -> None:
        delivery = session.by_task.get(task_id)
        task = self._leased(task_id, delivery.members[task_id]) if delivery else None
        if task is not None:
            task.progress = min(int(percent), 100)
            task.progress_message = message
            self.broker.touch(task)

    # --- maintenance -----------------------------------------------------------------------------
    def promote(self) -> int:
        """SCHEDULED tasks whose time has come -> PENDING."""
        now = self.now()
        moved = 0
        while batch := self.broker.pop_due_scheduled(now, max(1, self.config.lease_batch_max)):
            for task in batch:
                self.transitions.move(task, State.PENDING, now, due=task.due)
                moved += 1
        self.wake_due()
        return moved

    def reap(self) -> None:
        """Expired leases -> RETRY/ARCHIVED; purge retained COMPLETED rows; archive expired waiting tasks."""
        now = self.now()
        for task in self.broker.active_tasks():
            if task.state is State.ACTIVE and task.lease_expires_at <= now:
                self.transitions.lease_expired(task, now)
        for task in self.broker.pop_purgeable(now):
            self.broker.delete(task)
        for task in self.broker.pop_expired(now):
            self.transitions.expire(task, now)
        self.broker.compact()
        self.wake_due()

    def sweep_groups(self) -> int:
        """Fire every group whose size / max-delay / grace condition holds and that a session can take."""
        now = self.now()
        fired = 0
        for bucket in self.broker.buckets():
            cfg = self.group_config(bucket.queue, bucket.group)
            while bucket.members and self._ripe(bucket, cfg, now):
                if not self.dispatcher.fire_group(bucket, cfg.max_size, now):
                    break
                fired += 1
        return fired

    @staticmethod
    def _ripe(bucket: GroupBucket, cfg: GroupConfig, now: int) -> bool:
        return (
            len(bucket.members) >= cfg.max_size
            or now - bucket.first_at >= cfg.max_delay
            or now - bucket.last_at >= cfg.grace_period
        )

    def _maybe_fire_full(self, task: Task, now: int) -> None:
        cfg = self.group_config(task.queue, task.group)
        bucket = self.broker.bucket(task.queue, task.group)
        if bucket is not None and len(bucket.members) >= cfg.max_size:
            self.dispatcher.fire_group(bucket, cfg.max_size, now)

    def group_config(self, queue: str, group: str) -> GroupConfig:
        found = self.group_configs.get((queue, group)) or self.group_configs.get((queue, ""))
        if found is not None:
            return found
        cfg = self.config
        return GroupConfig(
            cfg.group_max_size, from_seconds(cfg.group_max_delay), from_seconds(cfg.group_grace_period)
        )

    def wake_due(self) -> None:
        """Pump every queue that has due work (after timers fire); recomputes the rate-limit wake."""
        self.dispatcher.rate_wake = None
        for queue in self.broker.queues_with_due_work(self.now()):
            self.dispatcher.mark(queue)
        self.pump()

    def pump(self, now: int | None = None) -> None:
        """Dispatch what can go now (``now``: the caller's reading of the clock, when it has one),
        then let the timer loop know if the timers changed."""
        self.dispatcher.pump(now)
        timers = (self.broker.timers_added, self.dispatcher.rate_wake)
        if timers != self._timers_told:
            # Only an added timer or a new rate wake can make the next timer earlier; a timer that
            # went away leaves the loop a wake-up too early, which finds nothing to do.
            self._timers_told = timers
            self.on_timer_change()

    def next_timer(self) -> int | None:
        """Earliest instant at which time alone makes new work dispatchable."""
        timer, wake = self.broker.next_timer(), self.dispatcher.rate_wake
        if timer is None or wake is None:
            return wake if timer is None else timer
        return min(timer, wake)
