"""Sans-I/O worker session machine (protocol §4, §5). No sockets, no clock, no asyncio.

Rules this machine enforces (the caller does all I/O and timing):

* Hello is the first frame of every stream; it is built from a :class:`SessionConfig`
  that was validated before any connection.
* Welcome establishes the session; nothing is sent before it but the Hello (protocol §5.3).
  Heartbeat cadence comes from ``Welcome.heartbeat_interval``.
* Frames that arrive before the Welcome (Dispatch, BatchDispatch, Cancel, Ping) are *held* and
  handled in arrival order once it arrives: upstream registers the session with its queues
  before it writes the Welcome, so on a backlogged queue a Dispatch can come first, and aborting
  then costs a reconnect and can strand the leased task until its lease expires. The hold is
  bounded by ``max_held`` = 2 x concurrency x declared queues + 16: what a server that grants
  ``concurrency`` credits per queue could send before its Welcome (each delivery and a Cancel
  for it), plus a few Pings. One frame more is a flood: the stream is aborted as a peer
  violation (transient: we reconnect). The Welcome timeout runs on regardless.
* Every delivery (Dispatch or BatchDispatch) is a job that gets exactly one answer:
  one Result, or one BatchResult holding one Result per member. A second result for a
  job is refused (:class:`ProtocolError`). Jobs of a dead stream are dropped: the server
  released them, so their outcomes are discarded and their executions cancelled.
* At most ``concurrency`` jobs run at once (a batch is one job), whatever the server
  sends (upstream grants ``concurrency`` credits per queue). Every start follows the quota
  rule of ``quota.py`` (weighted quotas, lending of idle slots); other deliveries are parked,
  heartbeated, and started when the rule lets them.
* Every Heartbeat lists every in-flight id of the live stream: running, parked, batch
  members. Our own heartbeats move the lease part of each job's deadline; the task-owned
  bounds (``TaskOptions.deadline``, start + ``timeout``) do not move. ``Dispatch.deadline``
  is NOT enforced as-is: upstream derives it from the lease at dispatch time and never
  moves it, so a long task would be cancelled despite heartbeating.
* Cancel -> cancel that job (SERVER_CANCEL); a parked job is answered RETRY at once.
  Ping is tolerated without reply. Unknown frame kinds are ignored.
* Drain: start nothing new; park (and heartbeat) late deliveries; at the grace deadline
  cancel running jobs with DRAIN (they report RELEASED); once nothing runs, half-close.
  Parked deliveries are never started nor answered: the server releases them with the
  stream, penalty-free (§5.10).
* Stream end: unauthenticated / permission_denied / invalid_argument -> Stop(error);
  anything else -> Reconnect(full-jitter delay); the counter resets on Welcome.

Transitions on server frames are a table (``_FRAME_TABLE``): (phase, frame kind) -> handler.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Sequence

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._protocol.actions import (
    MISSING_OUTCOME,
    Abort,
    Action,
    Cancel,
    CloseSend,
    Notice,
    OutcomeLike,
    PlainOutcome,
    Reconnect,
    Send,
    SessionStatistics,
    Start,
    Stop,
    result_message,
    wire_outcome,
)
from conveyor_sdk._protocol.backoff import Backoff, is_fatal
from conveyor_sdk._protocol.build import positional_builder
from conveyor_sdk._protocol.hello import SessionConfig
from conveyor_sdk._protocol.inflight import (
    Delivery,
    JobRecord,
    JobState,
    ParkingLot,
    delivery_from_envelopes,
)
from conveyor_sdk._protocol.progress import ProgressCoalescer
from conveyor_sdk._protocol.quota import DEFAULT_HOLD, Quota
from conveyor_sdk._protocol.types import CancelReason, OutcomeKind
from conveyor_sdk.errors import ConveyorError, ProtocolError, Unavailable

__all__ = [
    "Abort",
    "Action",
    "Cancel",
    "CloseSend",
    "Delivery",
    "Notice",
    "OutcomeLike",
    "Phase",
    "Reconnect",
    "Send",
    "SessionStatistics",
    "Start",
    "Stop",
    "WorkerSession",
    "wire_outcome",
]

DEFAULT_LEASE_TTL = 60.0
_INF = float("inf")


class Phase(enum.Enum):
    IDLE = "idle"  # no stream (before the first connect, or waiting to reconnect)
    AWAITING_WELCOME = "awaiting-welcome"
    OPEN = "open"
    CLOSING = "closing"  # our request side is closed; waiting for the server's end
    STOPPED = "stopped"

    # Enum's own __hash__ is a Python-level method; every frame looks its handler up in the
    # frame table by (phase, frame kind), and the members are singletons, so identity is equality.
    __hash__ = object.__hash__


_new_start = positional_builder(Start)  # one per started job (see build.py)
_KIND_NAMES = {kind: kind.name for kind in OutcomeKind}  # a result's counter (Enum.name is a property)


def _always(_: Delivery) -> bool:
    return True


CanStart = Callable[[Delivery], bool]


class WorkerSession:
    """The worker's protocol state across reconnects. Feed it frames and times; run its actions."""

    def __init__(
        self,
        config: SessionConfig,
        *,
        backoff: Backoff | None = None,
        progress_interval: float = 1.0,
        welcome_timeout: float = 30.0,
        close_timeout: float = 10.0,
        quota_hold: float = DEFAULT_HOLD,
    ) -> None:
        self.config = config
        self.backoff = backoff or Backoff()
        self.progress_interval = progress_interval
        self.welcome_timeout = welcome_timeout
        self.close_timeout = close_timeout
        self.phase = Phase.IDLE
        self.draining = False
        self.epoch = 0
        self.session_id = ""
        self.server_version = ""
        self.welcomes = 0  # Welcomes accepted so far (a change tells the driver to log the session)
        self.last_frame: str | None = None  # the oneof name of the frame fed last (None: empty frame)
        self.lease_ttl = DEFAULT_LEASE_TTL
        self.heartbeat_interval = DEFAULT_LEASE_TTL / 3
        self._jobs: dict[str, JobRecord] = {}
        self._task_index: dict[str, str] = {}  # task id -> job id (live stream only)
        self._lot = ParkingLot(config.queues)
        self._quota = Quota(config.queues, config.concurrency, hold=quota_hold)
        self._held: list[pb.ServerMessage] = []  # frames read before the Welcome, in order
        self._replaying = False  # handling the held frames: deliveries park, one fill at the end
        # This stream held more deliveries than concurrency: its server grants credits per
        # queue (upstream), so a finished job's queue is expected to refill (see quota.py).
        self._over_delivers = False
        self.max_held = 2 * config.concurrency * len(config.queues) + 16
        self._running = 0
        self._phase_deadline: float | None = None  # Welcome wait, or end-of-stream wait after CloseSend
        self._next_heartbeat: float | None = None
        self._last_heartbeat = 0.0
        self._grace_deadline: float | None = None
        # No live job's own deadline (a running job's bound, a parked one's task deadline) comes
        # before this time. It only ever errs low: a start or a park lowers it, while heartbeats
        # (later lease expiries) and ended jobs leave it where it was. Every loop turn asks for
        # the deadlines; with it, a turn does not walk every job while none can be due.
        self._due_floor = -_INF  # unknown: the next look walks the jobs
        self._progress = ProgressCoalescer(progress_interval)
        self._counts: Counter[str] = Counter()

    # -- queries ------------------------------------------------------------------------
    @property
    def running(self) -> int:
        """Jobs executing now (including cancelled ones still unwinding)."""
        return self._running

    @property
    def parked(self) -> int:
        return len(self._lot)

    def in_flight_ids(self) -> list[str]:
        """Task ids the live stream must heartbeat (running, parked, batch members)."""
        return list(self._task_index)

    def job(self, job_id: str) -> JobRecord | None:
        return self._jobs.get(job_id)

    def in_flight_by_queue(self) -> dict[str, tuple[int, int]]:
        """Queue -> (running, parked) *tasks* of the live stream: what the server counts in flight."""
        counts: dict[str, tuple[int, int]] = {}
        for rec in self._live_records():
            running, parked = counts.get(rec.delivery.queue, (0, 0))
            n = len(rec.delivery.tasks)
            if rec.state is JobState.RUNNING:
                running += n
            else:
                parked += n
            counts[rec.delivery.queue] = (running, parked)
        return counts

    def statistics(self) -> SessionStatistics:
        c = self._counts
        return SessionStatistics(
            phase=self.phase.value,
            draining=self.draining,
            session_id=self.session_id,
            server_version=self.server_version,
            connections=c["connections"],
            running=self._running,
            parked=len(self._lot),
            in_flight_ids=len(self._task_index),
            deliveries=c["deliveries"],
            batches=c["batches"],
            results={k.name: c[k.name] for k in OutcomeKind if c[k.name]},
            heartbeats=c["heartbeats"],
            progress_sent=self._progress.sent,
            dropped_on_disconnect=c["dropped"],
            reconnect_failures=self.backoff.failures,
            held_before_welcome=c["held"],
        )

    def __repr__(self) -> str:
        return (
            f"<WorkerSession {self.phase.value}{' draining' if self.draining else ''} "
            f"running={self._running}/{self.config.concurrency} parked={len(self._lot)} "
            f"session={self.session_id or '-'}>"
        )

    def next_deadline(self) -> float | None:
        """Earliest time :meth:`tick` has work to do (None = only on events)."""
        if self.phase in (Phase.AWAITING_WELCOME, Phase.CLOSING):
            return self._phase_deadline
        if self.phase is not Phase.OPEN:
            return None
        cands = [self._next_heartbeat] if self._next_heartbeat is not None else []
        progress_due = self._progress.next_deadline()
        if progress_due is not None:
            cands.append(progress_due)
        if self._lot.size and self._running < self.config.concurrency and not self.draining:
            lapse = self._quota.next_lapse()  # a slot held back for an expected queue may be lent then
            if lapse is not None:
                cands.append(lapse)
        if cands and not self.draining and self._due_floor >= min(cands):
            return min(cands)  # no job's deadline comes sooner (see _due_floor)
        uncancelled = False
        jobs_due = _INF
        for rec in self._live_records():
            if rec.state is JobState.RUNNING and rec.cancel_reason is None:
                uncancelled = True
                due = rec.bound(self._lease_expiry(rec))
            elif rec.state is JobState.PARKED and rec.delivery.task_deadline is not None:
                due = rec.delivery.task_deadline
            else:
                continue
            jobs_due = min(jobs_due, due)
        self._due_floor = jobs_due
        if jobs_due != _INF:
            cands.append(jobs_due)
        if self.draining and self._grace_deadline is not None and uncancelled:
            cands.append(self._grace_deadline)
        return min(cands) if cands else None

    # -- connection lifecycle ---------------------------------------------------------------
    def connect(self, now: float) -> list[Action]:
        """A new stream is open: send Hello and wait for Welcome."""
        if self.phase is not Phase.IDLE:
            raise ProtocolError(f"connect() while {self.phase.value}")
        self.phase = Phase.AWAITING_WELCOME
        self.epoch += 1
        self._counts["connections"] += 1
        self._phase_deadline = now + self.welcome_timeout
        self.backoff.began(now)  # a slow failed set-up counts toward the round's backoff
        self._held.clear()
        self._over_delivers = False
        return [Send(self.config.hello())]

    def connection_lost(self, error: ConveyorError | None, now: float) -> list[Action]:
        """The stream ended (``error`` None = clean end). Drops its jobs; decides what next."""
        actions: list[Action] = []
        closing = self.phase is Phase.CLOSING
        setup_failed = self.phase is Phase.AWAITING_WELCOME  # reached a node that did not welcome
        for rec in self._live_records():
            actions.extend(self._orphan(rec))
        self._lot.clear()
        self._held.clear()
        self._task_index.clear()
        self._progress.clear()
        self._next_heartbeat = self._phase_deadline = None
        if self.phase is Phase.STOPPED:
            return actions
        if closing or self.draining:
            self.phase = Phase.STOPPED
            actions.append(Stop(None))
        elif is_fatal(error):
            self.phase = Phase.STOPPED
            actions.append(Stop(error))
        else:
            self.phase = Phase.IDLE
            actions.append(Reconnect(self.backoff.next_delay(now, setup_failed=setup_failed)))
        return actions

    def _orphan(self, rec: JobRecord) -> list[Action]:
        self._counts["dropped"] += 1
        if rec.state is JobState.PARKED:
            del self._jobs[rec.delivery.job_id]
            return []
        rec.orphaned = True
        if rec.cancel_reason is not None:
            return []
        rec.cancel_reason = CancelReason.SERVER_CANCEL  # the server released it with the stream
        return [Cancel(rec.delivery.job_id, CancelReason.SERVER_CANCEL)]

    # -- server frames ------------------------------------------------------------------------
    def receive(self, msg: pb.ServerMessage, now: float, can_start: CanStart = _always) -> list[Action]:
        """Feed one server frame."""
        self.last_frame = kind = msg.WhichOneof("frame")
        if kind is None:
            return [Notice("ignored an empty or unknown server frame")]
        handler = _FRAME_TABLE.get((self.phase, kind))
        if handler is None:
            return []  # e.g. frames after our half-close, or on a stopped machine
        return handler(self, msg, now, can_start)

    def _on_early_frame(self, msg: pb.ServerMessage, now: float, can_start: CanStart) -> list[Action]:
        """Hold a frame read before the Welcome; it is handled once the Welcome arrives."""
        if len(self._held) >= self.max_held:
            err = ProtocolError(
                f"server sent more than {self.max_held} frames before its Welcome",
                details={"peer_violation": True},
            )
            return [Abort(err)]
        self._held.append(msg)
        self._counts["held"] += 1
        return []

    def _on_welcome(self, msg: pb.ServerMessage, now: float, can_start: CanStart) -> list[Action]:
        w = msg.welcome
        self.phase = Phase.OPEN
        self.welcomes += 1
        self.backoff.reset()
        self.session_id = w.session_id
        self.server_version = w.server_version
        ttl = w.lease_ttl.ToNanoseconds() / 1e9 if w.HasField("lease_ttl") else 0.0
        self.lease_ttl = ttl if ttl > 0 else DEFAULT_LEASE_TTL
        hb = w.heartbeat_interval.ToNanoseconds() / 1e9 if w.HasField("heartbeat_interval") else 0.0
        self.heartbeat_interval = hb if hb > 0 else self.lease_ttl / 3
        self._phase_deadline = None
        self._last_heartbeat = now
        self._next_heartbeat = now + self.heartbeat_interval
        self._quota.opened(now)
        return self._replay_held(now, can_start) + self._maybe_close(now)

    def _replay_held(self, now: float, can_start: CanStart) -> list[Action]:
        """Handle the frames held before the Welcome, in order; then start what the quota allows.

        Their deliveries are parked first and started by one fill, so the quota sees all of
        them (a Cancel among them answers its parked delivery without starting it).
        """
        if not self._held:
            return []
        held, self._held = self._held, []
        actions: list[Action] = []
        self._replaying = True
        try:
            for msg in held:
                handler = _FRAME_TABLE.get((Phase.OPEN, msg.WhichOneof("frame") or ""))
                if handler is not None:
                    actions += handler(self, msg, now, can_start)
        finally:
            self._replaying = False
        return actions + self._fill(now, can_start)

    def _on_duplicate_welcome(self, msg: pb.ServerMessage, now: float, can_start: CanStart) -> list[Action]:
        return [Notice("ignored a second Welcome")]

    def _on_ping(self, msg: pb.ServerMessage, now: float, can_start: CanStart) -> list[Action]:
        return []

    def _on_dispatch(self, msg: pb.ServerMessage, now: float, can_start: CanStart) -> list[Action]:
        d = msg.dispatch
        task = d.task  # an absent task reads as the default envelope, whose id is empty
        task_id = task.id
        if not task_id:
            return [Notice("ignored a Dispatch without a task id")]
        if task_id in self._task_index:
            return [Notice(f"ignored a duplicate Dispatch of in-flight task {task_id}")]
        # Dispatch.deadline is not read: it is the lease's end, and heartbeats keep the lease.
        delivery = delivery_from_envelopes((task,), batch=False, group="", now=now, first_id=task_id)
        return self._accept(delivery, now, can_start)

    def _on_batch_dispatch(self, msg: pb.ServerMessage, now: float, can_start: CanStart) -> list[Action]:
        b = msg.batch_dispatch
        tasks = tuple(t for t in b.tasks if t.id and t.id not in self._task_index)
        if len(tasks) != len(b.tasks) or len({t.id for t in tasks}) != len(tasks):
            return [Notice("ignored a BatchDispatch with empty, duplicate or in-flight member ids")]
        if not tasks:
            return [Notice("ignored an empty BatchDispatch")]
        delivery = delivery_from_envelopes(tasks, batch=True, group=b.group, now=now)
        self._counts["batches"] += 1
        return self._accept(delivery, now, can_start)

    def _accept(self, delivery: Delivery, now: float, can_start: CanStart) -> list[Action]:
        if delivery.job_id in self._jobs:  # an orphaned run of the same job is still unwinding
            return [Notice(f"ignored a delivery of {delivery.job_id} while its previous run unwinds")]
        self._counts["deliveries"] += 1
        self._jobs[delivery.job_id] = rec = JobRecord(delivery, self.epoch)
        for task in delivery.tasks:
            self._task_index[task.id] = delivery.job_id
        queue, quota = delivery.queue, self._quota
        if queue not in quota.weights:
            quota.add(queue)
        if self._replaying:  # a held frame: _replay_held fills once all of them are parked
            self._park(queue, delivery)
            self._over_delivers = self._over_delivers or self._lot.size > self.config.concurrency
            return []
        free = self.config.concurrency - self._running
        if (  # nothing waits, a slot is free: start it without the parking lot (the common case)
            not self._lot.size
            and free > 0
            and not self.draining
            and self.phase is Phase.OPEN
            and (quota.below(queue) or quota.admits(queue, free, (), now, False))
            and can_start(delivery)
        ):
            return self._start(rec, now)
        self._park(queue, delivery)
        if self._running + self._lot.size > self.config.concurrency:
            self._over_delivers = True
        return self._fill(now, can_start)

    def _on_cancel(self, msg: pb.ServerMessage, now: float, can_start: CanStart) -> list[Action]:
        job_id = self._task_index.get(msg.cancel.task_id)
        rec = self._jobs.get(job_id) if job_id else None
        if rec is None:
            return []
        if rec.state is JobState.PARKED:
            return self._answer_parked(rec, OutcomeKind.RETRY, "canceled by server")
        if rec.cancel_reason is not None:
            return []
        rec.cancel_reason = CancelReason.SERVER_CANCEL
        return [Cancel(rec.delivery.job_id, CancelReason.SERVER_CANCEL)]

    # -- local events ----------------------------------------------------------------------------
    def job_finished(
        self, job_id: str, outcomes: Sequence[OutcomeLike], now: float, can_start: CanStart = _always
    ) -> list[Action]:
        """A started job ended; ``outcomes`` has one entry per task, in delivery order."""
        rec = self._jobs.get(job_id)
        if rec is None or rec.state is not JobState.RUNNING:
            raise ProtocolError(f"job {job_id!r} is not running: its result was already reported or dropped")
        del self._jobs[job_id]
        self._running -= 1
        self._quota.ended(rec.delivery.queue, now)
        actions: list[Action] = []
        if not rec.orphaned:
            padded = [*outcomes[: len(rec.delivery.tasks)]]
            padded += [MISSING_OUTCOME] * (len(rec.delivery.tasks) - len(padded))
            actions.append(self._result_frame(rec, padded))
        if self._lot.size:  # _fill has nothing to start otherwise (the usual case: nothing parked)
            actions += self._fill(now, can_start)
        if self.draining:  # _maybe_close closes only a draining session
            actions += self._maybe_close(now)
        return actions

    def capacity_changed(self, now: float, can_start: CanStart = _always) -> list[Action]:
        """The executor freed capacity (its wakeup callback): try to start parked jobs."""
        return self._fill(now, can_start)

    def progress(self, task_id: str, percent: int, message: str, now: float) -> list[Action]:
        """Record progress; sends at most one Progress per task per interval (last value wins)."""
        if self.phase is not Phase.OPEN or task_id not in self._task_index:
            return []
        frame = self._progress.record(task_id, percent, message, now)
        return [] if frame is None else [Send(frame)]

    def drain(self, now: float, grace: float) -> list[Action]:
        """Start (or tighten) a drain; ``grace`` 0 releases everything at once."""
        self.draining = True
        deadline = now + max(0.0, grace)
        if self._grace_deadline is None or deadline < self._grace_deadline:
            self._grace_deadline = deadline
        if self.phase is Phase.IDLE:
            self.phase = Phase.STOPPED
            return [Stop(None)]
        if self.phase is Phase.AWAITING_WELCOME:
            # Nothing has started on a session without its Welcome, so there is nothing to
            # drain; a half-close would wait out close_timeout on a server that never answers.
            # Held deliveries go back with the stream's close (protocol §5.10).
            self._held.clear()
            self._phase_deadline = None
            self.phase = Phase.STOPPED
            return [Stop(None)]
        return self.tick(now)

    def tick(self, now: float, can_start: CanStart = _always) -> list[Action]:
        """Do whatever is due at ``now`` (heartbeats, deadlines, progress, drain grace)."""
        if self.phase in (Phase.AWAITING_WELCOME, Phase.CLOSING):
            if self._phase_deadline is not None and now >= self._phase_deadline:
                self._phase_deadline = None
                if self.phase is Phase.AWAITING_WELCOME:
                    return [Abort(Unavailable(f"no Welcome within {self.welcome_timeout:g}s"))]
                return [
                    Abort(
                        Unavailable(f"server did not end the stream {self.close_timeout:g}s after our close")
                    )
                ]
            return []
        if self.phase is not Phase.OPEN:
            return []
        actions = self._heartbeat_if_due(now)
        actions += self._enforce_deadlines(now)
        actions += [Send(m) for m in self._progress.due(now)]
        if self.draining and self._grace_deadline is not None and now >= self._grace_deadline:
            actions += self._release_all()
        return actions + self._fill(now, can_start) + self._maybe_close(now)

    # -- internals -----------------------------------------------------------------------------------
    def _live_records(self) -> list[JobRecord]:
        return [r for r in self._jobs.values() if r.epoch == self.epoch and not r.orphaned]

    def _lease_expiry(self, rec: JobRecord) -> float:
        return max(rec.delivery.received_at, self._last_heartbeat) + self.lease_ttl

    def _heartbeat_if_due(self, now: float) -> list[Action]:
        if self._next_heartbeat is None or now < self._next_heartbeat:
            return []
        msg = pb.WorkerMessage()
        msg.heartbeat.active_task_ids.extend(self._task_index)
        self._last_heartbeat = now
        self._next_heartbeat = now + self.heartbeat_interval
        self._counts["heartbeats"] += 1
        return [Send(msg)]

    def _enforce_deadlines(self, now: float) -> list[Action]:
        actions: list[Action] = []
        if now < self._due_floor:
            return actions  # nothing can be due yet (see _due_floor)
        floor = _INF
        for rec in self._live_records():
            if rec.state is JobState.RUNNING:
                if rec.cancel_reason is None:
                    due = rec.bound(self._lease_expiry(rec))
                    if now < due:
                        floor = min(floor, due)
                    else:
                        rec.cancel_reason = CancelReason.DEADLINE
                        actions.append(Cancel(rec.delivery.job_id, CancelReason.DEADLINE))
            elif rec.delivery.task_deadline is not None:
                if now < rec.delivery.task_deadline:
                    floor = min(floor, rec.delivery.task_deadline)
                else:
                    actions += self._answer_parked(rec, OutcomeKind.RETRY, "deadline exceeded")
        self._due_floor = floor
        return actions

    def _release_all(self) -> list[Action]:
        actions: list[Action] = []
        for rec in self._live_records():
            if rec.state is JobState.RUNNING and rec.cancel_reason is None:
                rec.cancel_reason = CancelReason.DRAIN
                actions.append(Cancel(rec.delivery.job_id, CancelReason.DRAIN))
        return actions

    def _fill(self, now: float, can_start: CanStart) -> list[Action]:
        actions: list[Action] = []
        if self.draining or self.phase is not Phase.OPEN or not self._lot.size:
            return actions
        quota, concurrency = self._quota, self.config.concurrency
        quota.prune(now)

        def choose(ready: list[str]) -> str | None:
            free = concurrency - self._running
            return quota.choose(ready, self._lot.waiting(), free, now, self._over_delivers)

        while self._running < concurrency:
            job_id = self._lot.pick(lambda jid: can_start(self._jobs[jid].delivery), choose)
            if job_id is None:
                break
            actions += self._start(self._jobs[job_id], now)
        return actions

    def _park(self, queue: str, delivery: Delivery) -> None:
        self._lot.park(queue, delivery.job_id)
        if delivery.task_deadline is not None:
            self._due_floor = min(self._due_floor, delivery.task_deadline)

    def _start(self, rec: JobRecord, now: float) -> list[Action]:
        """Start a delivery that has a slot (it is not, or no longer, in the parking lot)."""
        d = rec.delivery
        if d.task_deadline is not None and now >= d.task_deadline:
            return self._answer_parked(rec, OutcomeKind.RETRY, "deadline exceeded")
        deadline = d.task_deadline
        if d.timeout is not None and (deadline is None or now + d.timeout < deadline):
            deadline = now + d.timeout
        rec.state, rec.started_at, rec.deadline = JobState.RUNNING, now, deadline
        due = max(d.received_at, self._last_heartbeat) + self.lease_ttl  # rec.bound(), written out
        if deadline is not None and deadline < due:
            due = deadline
        self._due_floor = min(self._due_floor, due)
        self._running += 1
        self._quota.started(d.queue)
        return [_new_start(d, deadline)]

    def _maybe_close(self, now: float) -> list[Action]:
        # Parked (never started) deliveries do not hold the close back: the server's
        # safety net releases them penalty-free when the stream closes (protocol §5.10).
        if not self.draining or self.phase is not Phase.OPEN:
            return []
        if any(r.state is JobState.RUNNING for r in self._live_records()):
            return []
        self.phase = Phase.CLOSING
        self._phase_deadline = now + self.close_timeout
        return [CloseSend()]

    def _answer_parked(self, rec: JobRecord, kind: OutcomeKind, error_msg: str) -> list[Action]:
        self._lot.remove(rec.delivery.queue, rec.delivery.job_id)
        del self._jobs[rec.delivery.job_id]
        plain = PlainOutcome(kind, error_msg)
        return [self._result_frame(rec, [plain] * len(rec.delivery.tasks))]

    def _result_frame(self, rec: JobRecord, outcomes: Sequence[OutcomeLike]) -> Send:
        msg, kinds = result_message(rec.delivery, outcomes, rec.cancel_reason)
        for task, kind in zip(rec.delivery.tasks, kinds, strict=True):
            self._counts[_KIND_NAMES[kind]] += 1
            self._task_index.pop(task.id, None)
            self._progress.forget(task.id)
        return Send(msg)


_Handler = Callable[[WorkerSession, pb.ServerMessage, float, CanStart], list[Action]]
_FRAME_TABLE: dict[tuple[Phase, str], _Handler] = {
    **{
        (Phase.AWAITING_WELCOME, k): WorkerSession._on_early_frame
        for k in ("dispatch", "cancel", "batch_dispatch", "ping")
    },
    (Phase.AWAITING_WELCOME, "welcome"): WorkerSession._on_welcome,
    (Phase.OPEN, "welcome"): WorkerSession._on_duplicate_welcome,
    (Phase.OPEN, "dispatch"): WorkerSession._on_dispatch,
    (Phase.OPEN, "batch_dispatch"): WorkerSession._on_batch_dispatch,
    (Phase.OPEN, "cancel"): WorkerSession._on_cancel,
    (Phase.OPEN, "ping"): WorkerSession._on_ping,
}
