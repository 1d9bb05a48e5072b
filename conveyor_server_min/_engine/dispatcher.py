"""Dispatch decisions: which task goes to which session, as plain synchronous methods.

Rules (protocol document §5.4-5.5, §5.11):
* a session never holds more than ``concurrency`` deliveries across all its queues;
* a queue's tasks are spread over the sessions serving it by smooth weighted
  round-robin (SWRR) on each session's Hello weight for that queue;
* when a chosen session serves several queues with work, its slot goes to the
  queue picked by SWRR over its own queue weights;
* within a queue: priority desc, due asc, id asc (the broker's ready heap);
* paused queues dispatch nothing; rate limits gate each dispatch; a task whose
  concurrency key is saturated is parked until a slot on that key frees;
* a fired group goes as one BatchDispatch (one slot) to a session that listed
  the group's type in ``batch_types``;
* a task whose lease lapsed in a session is not offered straight back to it: it goes to
  another session serving its queue that has a free slot, and to the same session only
  when none has one and that session was heard from after the lapse (:meth:`declines`).

``pump()`` runs until no queue can make progress. Outbound frames are handed to
each session's ``sink`` synchronously; nothing here awaits.
"""

from __future__ import annotations

from conveyor_server_min._engine.broker import Broker, GroupBucket
from conveyor_server_min._engine.clock import Clock, clamp
from conveyor_server_min._engine.limits import TokenBucket
from conveyor_server_min._engine.model import State, Task
from conveyor_server_min._engine.sessions import (
    BatchAction,
    Delivery,
    DispatchAction,
    SessionState,
    swrr_pick,
)
from conveyor_server_min._engine.transitions import Transitions
from conveyor_server_min.service_api import EngineConfig

__all__ = ["Dispatcher"]


class Dispatcher:
    """Owns sessions, the per-queue SWRR state, rate buckets and parked tasks."""

    def __init__(self, broker: Broker, clock: Clock, config: EngineConfig, transitions: Transitions) -> None:
        self.broker = broker
        self.clock = clock
        self.config = config
        self.transitions = transitions
        self.sessions: dict[str, SessionState] = {}
        self.rate_limits: dict[str, TokenBucket] = {}
        self.key_limits: dict[str, int] = {}
        self._serving: dict[str, dict[str, SessionState]] = {}
        self._queue_swrr: dict[str, dict[str, int]] = {}
        self._dirty: dict[str, None] = {}  # queues that may be able to dispatch
        self._dirty_sessions: dict[str, SessionState] = {}  # sessions that may have a free slot
        # Queues that may hold ready tasks (a superset); each session's ``work`` is always
        # ``_has_work`` restricted to its own queues, so a freed slot looks at nothing else.
        self._has_work: dict[str, None] = {}
        self._rank: dict[str, dict[str, int]] = {}  # session id -> its queues' Hello order
        self._parked: dict[tuple[str, str], list[tuple[Task, int]]] = {}
        self._lease_seq = 0
        self._delivery_seq = 0
        self.rate_wake: int | None = None
        transitions.on_ready = self.mark
        transitions.on_key_freed = self.unpark

    def __repr__(self) -> str:
        return f"Dispatcher(sessions={len(self.sessions)}, dirty={len(self._dirty)})"

    # --- sessions --------------------------------------------------------------------------------
    def register(self, session: SessionState) -> None:
        """Add a session; it gets work once :meth:`mark_session` is called for it (after Welcome)."""
        self.sessions[session.id] = session
        queues, work = session.queues, self._has_work
        for queue in queues:
            self._serving.setdefault(queue, {})[session.id] = session
        if len(queues) <= len(work):
            session.work = {q: None for q in queues if q in work}
        else:
            session.work = {q: None for q in work if q in queues}

    def unregister(self, session: SessionState) -> None:
        self.sessions.pop(session.id, None)
        self._dirty_sessions.pop(session.id, None)
        self._rank.pop(session.id, None)
        for queue in session.queues:
            serving = self._serving.get(queue)
            if serving is not None:
                serving.pop(session.id, None)
                if not serving:
                    del self._serving[queue]
            swrr = self._queue_swrr.get(queue)
            if swrr is not None:
                swrr.pop(session.id, None)
                if not swrr:
                    del self._queue_swrr[queue]

    def restore_lease_seq(self, highest: int) -> None:
        """Continue lease ids above ``highest`` (leases loaded from a durable store)."""
        self._lease_seq = max(self._lease_seq, highest)

    def serving(self, queue: str) -> list[SessionState]:
        return list(self._serving.get(queue, {}).values())

    # --- waking ----------------------------------------------------------------------------------
    def mark(self, queue: str) -> None:
        """``queue`` may have gained ready work."""
        if queue in self._serving:  # else no session takes it now; one that comes finds it in work
            self._dirty[queue] = None
        if queue not in self._has_work:
            self._has_work[queue] = None
            for session in self._serving.get(queue, {}).values():
                session.work[queue] = None

    def _drop(self, queue: str) -> None:
        """``queue`` was seen unable to dispatch: forget it until it is marked again."""
        if self._has_work.pop(queue, False) is None:
            for session in self._serving.get(queue, {}).values():
                session.work.pop(queue, None)

    def may_take(self, queue: str) -> bool:
        """Whether a session serving ``queue`` has a free slot (a pump may dispatch from it)."""
        serving = self._serving.get(queue)
        return serving is not None and any(s.free > 0 for s in serving.values())

    def mark_session(self, session: SessionState) -> None:
        """``session`` may have gained a free slot (costs nothing per queue it declared)."""
        if session.id in self.sessions:
            self._dirty_sessions[session.id] = session

    def unpark(self, queue: str, key: str) -> None:
        parked = self._parked.pop((queue, key), None)
        if not parked:
            return
        now = self.clock.now()
        for task, token in parked:
            if task.token == token and task.state in (State.PENDING, State.RETRY):
                self.broker.requeue(task, now)
        self.mark(queue)

    def unpark_queue(self, queue: str) -> None:
        for q, key in [k for k in self._parked if k[0] == queue]:
            self.unpark(q, key)

    # --- the pump --------------------------------------------------------------------------------
    def pump(self, now: int | None = None) -> int:
        """Dispatch until nothing more can go; returns the number of deliveries made.

        Cost follows the queues that hold ready tasks, never the number of queues a session declared:
        a freed slot looks only at the session's ``work`` (its queues that may hold ready tasks).
        """
        if not (self._dirty or self._dirty_sessions):
            return 0
        if now is None:
            now = self.clock.now()
        made = 0
        while self._dirty or self._dirty_sessions:
            while self._dirty_sessions:
                session = self._dirty_sessions.pop(next(iter(self._dirty_sessions)))
                made += self._fill(session, now)
            for queue in list(self._dirty):
                if self._step(queue, now):
                    made += 1
                else:
                    self._dirty.pop(queue, None)
        return made

    def _fill(self, session: SessionState, now: int) -> int:
        """Give ``session``'s free slots to its ready queues (SWRR over its weights)."""
        made = 0
        declined: set[str] = set()  # queues whose ready tasks this session declines (see declines)
        while session.free > 0 and session.id in self.sessions:
            ready = self._ready_queues(session, now)
            if declined:
                ready = [r for r in ready if r[0] not in declined]
            if not ready:
                break
            target = ready[0][0] if len(ready) == 1 else swrr_pick(session.queue_swrr, ready)
            task = self._take(session, target, now)
            if task is None:
                declined.add(target)
            else:
                made += self._offer(session, target, task, now)
        return made

    def _take(self, session: SessionState, queue: str, now: int) -> Task | None:
        """Pop the first ready task of ``queue`` that ``session`` does not decline; the declined
        ones stay ready, in their order. Costs one pop unless the head lapsed in this session."""
        task = self.broker.pop_ready(queue, now)
        if task is None or not self.declines(session, task):
            return task
        aside = [task]
        while (task := self.broker.pop_ready(queue, now)) is not None and self.declines(session, task):
            aside.append(task)
        for held in aside:
            self.broker.requeue(held, now)
        return task

    def declines(self, session: SessionState, task: Task) -> bool:
        """Whether ``task`` must not go to ``session`` now: its lease lapsed there, and another
        session serving the queue has a free slot, or ``session`` sent nothing since the lapse."""
        if task.lapsed_in != session.id:
            return False
        if session.last_heard < task.lapsed_at:
            return True
        serving = self._serving.get(task.queue, {})
        return any(other.free > 0 for other in serving.values() if other is not session)

    def _ready_queues(self, session: SessionState, now: int) -> list[tuple[str, int]]:
        """The session's queues that can dispatch now, in Hello order, with their weights."""
        candidates = list(session.work)
        if len(candidates) > 1:
            rank = self._rank.get(session.id)
            if rank is None:
                rank = self._rank[session.id] = {q: i for i, q in enumerate(session.queues)}
            candidates.sort(key=rank.__getitem__)
        queues = session.queues
        return [(q, queues[q]) for q in candidates if self._queue_ready(q, now)]

    def _step(self, queue: str, now: int) -> bool:
        serving = self._serving.get(queue)
        if not serving:
            return False
        sessions = [s for s in serving.values() if s.free > 0]
        if not sessions or not self._queue_ready(queue, now):
            return False
        if len(sessions) == 1:
            session = sessions[0]
        else:
            current = self._queue_swrr.setdefault(queue, {})
            chosen = swrr_pick(current, [(s.id, s.queues[queue]) for s in sessions])
            session = self.sessions[chosen]
        target = self._pick_queue(session, queue, now)
        task = self._take(session, target, now)
        if task is None and target != queue:
            # the weighted pick chose another of the session's queues whose ready tasks it declines
            # (they lapsed there): this queue's own task must still go, or the slot idles
            target, task = queue, self._take(session, queue, now)
        if task is not None:
            self._offer(session, target, task, now)
            return True
        for other in sessions:  # the chosen session declined every ready task: offer them elsewhere
            if other is not session and (task := self._take(other, queue, now)) is not None:
                self._offer(other, queue, task, now)
                return True
        return False

    def _queue_ready(self, queue: str, now: int) -> bool:
        """Whether ``queue`` can dispatch now; if not it leaves ``_has_work`` until marked again (every
        way a queue regains work - commit, release, retry, timer, resume, rate refill - marks it)."""
        if self.broker.is_paused(queue) or self.broker.peek_ready(queue, now) is None:
            self._drop(queue)
            return False
        bucket = self.rate_limits.get(queue)
        if bucket is not None and not bucket.available(now):
            wake = bucket.next_token_at()
            self.rate_wake = wake if self.rate_wake is None else min(self.rate_wake, wake)
            self._drop(queue)
            return False
        return True

    def _pick_queue(self, session: SessionState, queue: str, now: int) -> str:
        if len(session.queues) == 1:
            return queue
        ready = self._ready_queues(session, now)
        if len(ready) <= 1:
            return queue
        return swrr_pick(session.queue_swrr, ready)

    def _offer(self, session: SessionState, queue: str, task: Task, now: int) -> int:
        """Lease ``task`` to ``session`` (1), or expire / park it instead (0)."""
        if task.expires_at is not None and task.expires_at <= now:
            self.transitions.expire(task, now)
            return 0
        key = task.concurrency_key
        if key:
            limit = self.key_limits.get(queue)
            if limit is not None and self.transitions.key_active.get((queue, key), 0) >= limit:
                self._parked.setdefault((queue, key), []).append((task, task.token))
                return 0
        bucket = self.rate_limits.get(queue)
        if bucket is not None:
            bucket.take(now)
        self._lease_seq += 1
        self.transitions.activate(task, session.id, self._lease_seq, now)
        self._delivery_seq += 1
        session.add(Delivery(self._delivery_seq, {task.id: self._lease_seq}), now)
        session.sink(DispatchAction(task, self.deadline_for(task, now)))
        return 1

    def deadline_for(self, task: Task, now: int) -> int:
        """min(lease expiry, task deadline, now + timeout), within the Timestamp range."""
        deadline = task.lease_expires_at
        if task.deadline is not None:
            deadline = min(deadline, task.deadline)
        if task.timeout is not None:
            deadline = min(deadline, now + task.timeout)
        return clamp(deadline)

    # --- groups ----------------------------------------------------------------------------------
    def fire_group(self, bucket: GroupBucket, max_size: int, now: int) -> bool:
        """Lease up to ``max_size`` members as one batch to a capable session; False if none can take it."""
        if self.broker.is_paused(bucket.queue) or not bucket.members:
            return False
        members = [t for t in map(self.broker.get, bucket.members) if t is not None]
        members.sort(key=lambda t: (t.enqueued_at, t.id))
        task_type = members[0].type
        capable = [
            s
            for s in self._serving.get(bucket.queue, {}).values()
            if s.free > 0 and task_type in s.batch_types
        ]
        if not capable:
            return False
        current = self._queue_swrr.setdefault(bucket.queue, {})
        chosen = self.sessions[swrr_pick(current, [(s.id, s.queues[bucket.queue]) for s in capable])]
        batch = members[:max_size]
        self._lease_seq += 1
        for task in batch:
            self.transitions.activate(task, chosen.id, self._lease_seq, now)
        self._delivery_seq += 1
        chosen.add(Delivery(self._delivery_seq, {t.id: self._lease_seq for t in batch}, batch=True), now)
        deadline = min(self.deadline_for(t, now) for t in batch)
        chosen.sink(BatchAction(tuple(batch), deadline, bucket.group))
        return True
