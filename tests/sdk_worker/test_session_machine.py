"""The sans-I/O session machine, driven by scripted server frames and explicit times."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._protocol.actions import PlainOutcome
from conveyor_sdk._protocol.backoff import Backoff, is_fatal
from conveyor_sdk._protocol.hello import SessionConfig
from conveyor_sdk._protocol.session import (
    Abort,
    Action,
    Cancel,
    CloseSend,
    Phase,
    Reconnect,
    Send,
    Start,
    Stop,
    WorkerSession,
)
from conveyor_sdk._protocol.types import CancelReason, OutcomeKind
from conveyor_sdk.errors import (
    InvalidArgument,
    PermissionDenied,
    ProtocolError,
    Unauthenticated,
    Unavailable,
)
from tests._frames import welcome

T0 = 1_000_000.0
OK = PlainOutcome(OutcomeKind.SUCCESS)


def _cfg(concurrency: int = 2, queues: dict[str, int] | None = None) -> SessionConfig:
    return SessionConfig.build(
        queues=queues or {"default": 1}, concurrency=concurrency, sdk_version="conveyor-py/0.1.0"
    )


_welcome = partial(welcome, "S1")  # ttl=, interval= as the tests need


def _env(tid: str, queue: str = "default", type_: str = "t", deadline: float | None = None,
         timeout: float | None = None) -> tpb.TaskEnvelope:  # fmt: skip
    env = tpb.TaskEnvelope(id=tid, queue=queue, type=type_)
    if deadline is not None:
        env.options.deadline.FromNanoseconds(int(deadline * 1e9))
    if timeout is not None:
        env.options.timeout.FromNanoseconds(int(timeout * 1e9))
    return env


def _dispatch(tid: str, **kw: object) -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.dispatch.task.CopyFrom(_env(tid, **kw))  # type: ignore[arg-type]
    msg.dispatch.deadline.FromNanoseconds(int((T0 + 3) * 1e9))
    return msg


def _batch(*ids: str, group: str = "g") -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.batch_dispatch.tasks.extend(_env(i) for i in ids)
    msg.batch_dispatch.group = group
    return msg


def _cancel(tid: str) -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.cancel.task_id = tid
    return msg


def _open(concurrency: int = 2, **kw: object) -> WorkerSession:
    s = WorkerSession(_cfg(concurrency, **kw))  # type: ignore[arg-type]
    s.connect(T0)
    s.receive(_welcome(), T0)
    return s


def _sent(actions: Sequence[Action], kind: str | None = None) -> list[pb.WorkerMessage]:
    msgs = [a.message for a in actions if isinstance(a, Send)]
    return [m for m in msgs if kind is None or m.WhichOneof("frame") == kind]


def _starts(actions: Sequence[Action]) -> list[str]:
    return [a.delivery.job_id for a in actions if isinstance(a, Start)]


# -- Hello -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("queues", "concurrency", "match"),
    [
        ({}, 1, "at least one queue"),
        ({"bad name": 1}, 1, "invalid queue name"),
        ({"-x": 1}, 1, "invalid queue name"),
        ({"q": 0}, 1, "weight must be positive"),
        ({"q": -2}, 1, "weight must be positive"),
        ({"q": 1}, 0, "concurrency"),
    ],
)
def test_hello_validation_refuses_locally(queues: dict[str, int], concurrency: int, match: str) -> None:
    """Bad queues/weights/concurrency raise InvalidArgument before any connection."""
    with pytest.raises(InvalidArgument, match=match):
        SessionConfig.build(queues=queues, concurrency=concurrency, sdk_version="x")


def test_connect_sends_hello_first() -> None:
    """connect() emits exactly the Hello frame with queues, concurrency, version and batch types."""
    cfg = SessionConfig.build(
        queues=["a", "b.c"], concurrency=4, sdk_version="conveyor-py/0.1.0", batch_types=["z", "y"]
    )
    actions = WorkerSession(cfg).connect(T0)
    (hello,) = _sent(actions)
    h = hello.hello
    assert dict(h.queues) == {"a": 1, "b.c": 1} and h.concurrency == 4
    assert h.sdk_version == "conveyor-py/0.1.0" and list(h.batch_types) == ["y", "z"]


# -- Welcome, heartbeats ------------------------------------------------------------------------
def test_frames_before_welcome_are_held_then_handled_in_order() -> None:
    """Dispatch, Cancel, Ping before Welcome: nothing is sent or started; after it, in order."""
    s = WorkerSession(_cfg(concurrency=2))
    s.connect(T0)
    for frame in (_dispatch("a"), _dispatch("b"), _cancel("b"), pb.ServerMessage(ping=pb.Ping())):
        assert s.receive(frame, T0) == []
    assert s.tick(T0 + 1) == [] and s.next_deadline() == T0 + 30  # the Welcome wait runs on
    assert s.phase is Phase.AWAITING_WELCOME and s.in_flight_ids() == []
    assert s.statistics().held_before_welcome == 4
    actions = s.receive(_welcome(), T0 + 1)
    assert _starts(actions) == ["a"]
    (res,) = _sent(actions, "result")  # b was cancelled before it could start
    assert (res.result.task_id, res.result.outcome, res.result.error_msg) == ("b", 2, "canceled by server")
    assert s.phase is Phase.OPEN and s.in_flight_ids() == ["a"]
    assert s.statistics().connections == 1


def test_held_frames_are_bounded_and_a_flood_aborts_as_peer_violation() -> None:
    """One frame beyond max_held (2 x concurrency x queues + 16) aborts, transient (reconnect)."""
    s = WorkerSession(_cfg(concurrency=2, queues={"a": 1, "b": 1}))
    s.connect(T0)
    assert s.max_held == 2 * 2 * 2 + 16
    for i in range(s.max_held):
        assert s.receive(_dispatch(f"t{i}", queue="a"), T0) == []
    (abort,) = s.receive(_dispatch("one-more", queue="a"), T0)
    assert isinstance(abort, Abort) and isinstance(abort.error, ProtocolError)
    assert abort.error.details.get("peer_violation") and not is_fatal(abort.error)
    assert isinstance(s.connection_lost(abort.error, T0)[-1], Reconnect)
    s.connect(T0)  # the held frames died with their stream
    assert _starts(s.receive(_welcome(), T0)) == [] and s.in_flight_ids() == []


def test_welcome_timeout_applies_with_held_frames() -> None:
    """Held frames do not stretch the Welcome wait: no Welcome in time -> Abort, nothing started."""
    s = WorkerSession(_cfg(), welcome_timeout=5)
    s.connect(T0)
    s.receive(_dispatch("t1"), T0)
    (abort,) = s.tick(T0 + 5)
    assert isinstance(abort, Abort) and isinstance(abort.error, Unavailable)


def test_welcome_timeout_aborts() -> None:
    """No Welcome within the timeout -> Abort with Unavailable."""
    s = WorkerSession(_cfg(), welcome_timeout=5)
    s.connect(T0)
    assert s.next_deadline() == T0 + 5
    assert s.tick(T0 + 4) == []
    (abort,) = s.tick(T0 + 5)
    assert isinstance(abort, Abort) and isinstance(abort.error, Unavailable)


def test_heartbeat_cadence_from_welcome_lists_every_in_flight_id() -> None:
    """Heartbeats follow heartbeat_interval and list running, parked and batch-member ids."""
    s = _open(concurrency=1)
    assert s.next_deadline() == T0 + 1
    s.receive(_dispatch("a"), T0)
    s.receive(_dispatch("b"), T0)  # parked: concurrency 1
    s.receive(_batch("m1", "m2"), T0)  # parked too
    assert s.tick(T0 + 0.5) == []
    (hb,) = _sent(s.tick(T0 + 1), "heartbeat")
    assert sorted(hb.heartbeat.active_task_ids) == ["a", "b", "m1", "m2"]
    assert s.next_deadline() == T0 + 2


def test_heartbeat_interval_defaults_to_a_third_of_the_lease() -> None:
    """Without heartbeat_interval the cadence is lease_ttl / 3."""
    s = WorkerSession(_cfg())
    s.connect(T0)
    s.receive(_welcome(ttl=6, interval=None), T0)
    assert s.heartbeat_interval == pytest.approx(2.0)


def test_ping_is_tolerated_without_reply() -> None:
    """Ping produces no action, before or after Welcome."""
    s = WorkerSession(_cfg())
    s.connect(T0)
    ping = pb.ServerMessage(ping=pb.Ping())
    assert s.receive(ping, T0) == []
    s.receive(_welcome(), T0)
    assert s.receive(ping, T0) == []
    assert s.phase is Phase.OPEN


# -- gate, results -------------------------------------------------------------------------------
def test_local_gate_parks_extra_dispatches_and_starts_on_free_slot() -> None:
    """Beyond concurrency, dispatches park; a finished job frees a slot and the next one starts."""
    s = _open(concurrency=2)
    started = [j for tid in "abc" for j in _starts(s.receive(_dispatch(tid), T0))]
    assert started == ["a", "b"] and s.parked == 1
    actions = s.job_finished("a", [OK], T0 + 1)
    (res,) = _sent(actions, "result")
    assert res.result.task_id == "a" and res.result.outcome == OutcomeKind.SUCCESS
    assert _starts(actions) == ["c"]


def test_executor_can_start_gates_parked_jobs() -> None:
    """A job the executor refuses stays parked until capacity_changed()."""
    s = _open(concurrency=4)
    allowed = {"ok": False}
    assert _starts(s.receive(_dispatch("a"), T0, lambda d: allowed["ok"])) == []
    allowed["ok"] = True
    assert _starts(s.capacity_changed(T0, lambda d: allowed["ok"])) == ["a"]


def test_exactly_one_result_per_dispatch() -> None:
    """A second result for the same job is refused."""
    s = _open()
    s.receive(_dispatch("a"), T0)
    s.job_finished("a", [OK], T0)
    with pytest.raises(ProtocolError):
        s.job_finished("a", [OK], T0)


def test_batch_is_one_slot_and_one_batch_result() -> None:
    """A BatchDispatch uses one slot and is answered with one BatchResult with a Result per member."""
    s = _open(concurrency=1)
    actions = s.receive(_batch("m1", "m2", "m3"), T0)
    assert _starts(actions) == ["batch:m1"]
    out = [OK, PlainOutcome(OutcomeKind.RETRY, "x"), PlainOutcome(OutcomeKind.SKIP_RETRY, "y")]
    done = s.job_finished("batch:m1", out, T0)
    assert _sent(done, "result") == []
    (br,) = _sent(done, "batch_result")
    assert [(r.task_id, r.outcome) for r in br.batch_result.results] == [("m1", 1), ("m2", 2), ("m3", 3)]


def test_missing_outcomes_are_padded_and_unspecified_becomes_released() -> None:
    """Too few outcomes -> RETRY for the rest; UNSPECIFIED is never sent."""
    s = _open()
    s.receive(_batch("m1", "m2"), T0)
    (br,) = _sent(s.job_finished("batch:m1", [PlainOutcome(OutcomeKind.UNSPECIFIED)], T0))
    assert [r.outcome for r in br.batch_result.results] == [OutcomeKind.RELEASED, OutcomeKind.RETRY]


def test_weighted_turns_across_queues() -> None:
    """Parked jobs start in turns weighted by their queues' weights (quota.py), 3:1 here."""
    s = _open(concurrency=1, queues={"hi": 3, "lo": 1})
    s.receive(_dispatch("first", queue="hi"), T0)
    for i in range(4):
        s.receive(_dispatch(f"h{i}", queue="hi"), T0)
        s.receive(_dispatch(f"l{i}", queue="lo"), T0)
    order = []
    current = "first"
    now = T0
    for _ in range(8):
        now += 0.01
        started = _starts(s.job_finished(current, [OK], now))
        for _ in range(5):  # the turn was a queue whose refill is expected: lent once that lapses
            if started:
                break
            now = s.next_deadline() or now
            started = _starts(s.tick(now))
        (nxt,) = started
        order.append(nxt)
        current = nxt
    assert order[:4].count("l0") == 1 and [o[0] for o in order[:4]].count("h") == 3


# -- deadlines, cancel -------------------------------------------------------------------------------
def test_lease_part_of_the_deadline_moves_with_heartbeats() -> None:
    """Dispatch.deadline (lease-derived) is not enforced; heartbeats keep a long task alive."""
    s = _open()
    s.receive(_dispatch("long"), T0)
    t = T0
    for _ in range(20):  # 20 s under a 3 s lease
        t += 1
        assert not [a for a in s.tick(t) if isinstance(a, Cancel)]
    assert s.job("long") is not None


def test_task_timeout_cancels_with_deadline_reason() -> None:
    """start + timeout passes -> Cancel(DEADLINE); the cancelled outcome reports RETRY 'deadline exceeded'."""
    s = _open()
    s.receive(_dispatch("a", timeout=2.5), T0)
    assert s.next_deadline() == T0 + 1  # heartbeat first
    s.tick(T0 + 1)
    s.tick(T0 + 2)
    (cancel,) = [a for a in s.tick(T0 + 2.5) if isinstance(a, Cancel)]
    assert cancel == Cancel("a", CancelReason.DEADLINE)
    (res,) = _sent(s.job_finished("a", [PlainOutcome(OutcomeKind.RETRY, cancelled=True)], T0 + 3))
    assert (res.result.outcome, res.result.error_msg) == (OutcomeKind.RETRY, "deadline exceeded")


def test_parked_task_past_its_deadline_is_answered_without_starting() -> None:
    """A parked task whose TaskOptions.deadline passes gets RETRY 'deadline exceeded' unstarted."""
    s = _open(concurrency=1)
    s.receive(_dispatch("a"), T0)
    s.receive(_dispatch("b", deadline=T0 + 0.5), T0)
    actions = s.tick(T0 + 0.5)
    (res,) = _sent(actions, "result")
    assert res.result.task_id == "b" and res.result.error_msg == "deadline exceeded"
    assert _starts(s.job_finished("a", [OK], T0 + 0.6)) == []


def test_task_already_past_its_deadline_on_arrival_is_answered_without_starting() -> None:
    """An idle worker answers a Dispatch whose TaskOptions.deadline passed with RETRY; the slot stays free."""
    s = _open(concurrency=1)
    actions = s.receive(_dispatch("late", deadline=T0 - 1), T0)
    assert _starts(actions) == []
    (res,) = _sent(actions, "result")
    assert (res.result.task_id, res.result.error_msg) == ("late", "deadline exceeded")
    assert s.job("late") is None and s.parked == 0
    assert _starts(s.receive(_dispatch("next"), T0)) == ["next"]


@pytest.mark.parametrize(
    ("timeout", "deadline", "expected"),
    [
        (None, None, None),
        (2.0, None, T0 + 2),
        (None, T0 + 5, T0 + 5),
        (2.0, T0 + 5, T0 + 2),
        (9.0, T0 + 5, T0 + 5),
    ],
)
def test_start_deadline_is_the_sooner_of_timeout_and_task_deadline(
    timeout: float | None, deadline: float | None, expected: float | None
) -> None:
    """Start carries the task-owned bound: start + timeout or TaskOptions.deadline, whichever is first."""
    s = _open()
    (start,) = [
        a for a in s.receive(_dispatch("a", timeout=timeout, deadline=deadline), T0) if isinstance(a, Start)
    ]
    assert start.deadline == (None if expected is None else pytest.approx(expected))


def test_server_cancel_running_and_parked() -> None:
    """Cancel of a running job -> Cancel(SERVER_CANCEL) then RETRY; of a parked job -> RETRY at once."""
    s = _open(concurrency=1)
    s.receive(_dispatch("run"), T0)
    s.receive(_dispatch("park"), T0)
    assert s.receive(_cancel("run"), T0) == [Cancel("run", CancelReason.SERVER_CANCEL)]
    (res,) = _sent(s.receive(_cancel("park"), T0))
    assert (res.result.task_id, res.result.error_msg) == ("park", "canceled by server")
    assert s.receive(_cancel("unknown"), T0) == []
    (res,) = _sent(s.job_finished("run", [PlainOutcome(OutcomeKind.RETRY, cancelled=True)], T0))
    assert (res.result.outcome, res.result.error_msg) == (OutcomeKind.RETRY, "canceled by server")


# -- progress ---------------------------------------------------------------------------------------
def test_progress_is_coalesced_last_value_wins() -> None:
    """At most one Progress per task per interval; the pending last value is flushed on tick."""
    s = _open()
    s.receive(_dispatch("a"), T0)
    assert len(_sent(s.progress("a", 10, "", T0), "progress")) == 1
    for pct in (20, 30, 40):
        assert s.progress("a", pct, f"p{pct}", T0 + 0.1) == []
    assert s.next_deadline() == T0 + 1
    (p,) = _sent(s.tick(T0 + 1), "progress")
    assert (p.progress.percent, p.progress.message) == (40, "p40")
    assert s.progress("zzz", 1, "", T0 + 5) == []


# -- drain --------------------------------------------------------------------------------------------
def test_drain_parks_late_dispatch_then_releases_at_grace_and_closes() -> None:
    """Draining: nothing new starts, late dispatches are heartbeated (never answered), grace end -> DRAIN."""
    s = _open(concurrency=1)
    s.receive(_dispatch("run"), T0)
    assert s.drain(T0, grace=5) == []
    assert _starts(s.receive(_dispatch("late"), T0 + 1)) == []
    (hb,) = _sent(s.tick(T0 + 1), "heartbeat")
    assert sorted(hb.heartbeat.active_task_ids) == ["late", "run"]
    actions = s.tick(T0 + 5)
    assert Cancel("run", CancelReason.DRAIN) in actions
    assert _sent(actions, "result") == []
    done = s.job_finished("run", [PlainOutcome(OutcomeKind.RETRY, cancelled=True)], T0 + 5.1)
    (res,) = _sent(done, "result")  # the parked "late" one is left to the server's safety net
    assert res.result.outcome == OutcomeKind.RELEASED
    assert isinstance(done[-1], CloseSend) and s.phase is Phase.CLOSING
    assert s.connection_lost(None, T0 + 6) == [Stop(None)]


def test_no_past_deadline_while_cancelled_jobs_unwind() -> None:
    """After the grace release, next_deadline() never points at the past (no busy loop)."""
    s = _open()
    s.receive(_dispatch("a", timeout=0.5), T0)
    s.drain(T0, grace=0.2)
    s.tick(T0 + 0.2)  # DRAIN cancel issued; the job still unwinds
    nd = s.next_deadline()
    assert nd is not None and nd > T0 + 0.2
    assert s.tick(T0 + 0.6) == []  # no DEADLINE cancel on top of the DRAIN one


def test_drain_lets_finishing_tasks_report_real_outcome() -> None:
    """A task finishing within grace reports its real outcome, then the stream half-closes."""
    s = _open()
    s.receive(_dispatch("a"), T0)
    s.drain(T0, grace=30)
    done = s.job_finished("a", [PlainOutcome(OutcomeKind.SKIP_RETRY, "no")], T0 + 1)
    (res,) = _sent(done, "result")
    assert res.result.outcome == OutcomeKind.SKIP_RETRY and isinstance(done[-1], CloseSend)


def test_second_drain_releases_at_once() -> None:
    """drain(grace=0) after a long drain cancels running jobs immediately."""
    s = _open()
    s.receive(_dispatch("a"), T0)
    s.drain(T0, grace=30)
    assert s.drain(T0 + 0.5, grace=0) == [Cancel("a", CancelReason.DRAIN)]


def test_drain_while_disconnected_stops() -> None:
    """Draining while waiting to reconnect stops at once."""
    s = WorkerSession(_cfg())
    assert s.drain(T0, grace=30) == [Stop(None)]


# -- stream end, reconnect ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "fatal"),
    [
        (Unauthenticated("no"), True),
        (PermissionDenied("no"), True),
        (InvalidArgument("bad hello"), True),
        (Unavailable("down"), False),
        (None, False),
    ],
)
def test_fatal_vs_transient(error: object, fatal: bool) -> None:
    """unauthenticated/permission_denied/invalid_argument stop; anything else or a clean end reconnects."""
    s = _open()
    last = s.connection_lost(error, T0)[-1]  # type: ignore[arg-type]
    assert isinstance(last, Stop if fatal else Reconnect)
    if fatal:
        assert last == Stop(error)  # type: ignore[arg-type]


def test_dead_stream_drops_in_flight_and_discards_late_outcomes() -> None:
    """In-flight jobs of a dead stream are cancelled and their outcomes never reach the next stream."""
    s = _open(concurrency=1)
    s.receive(_dispatch("a"), T0)
    s.receive(_dispatch("b"), T0)
    actions = s.connection_lost(Unavailable("x"), T0)
    assert Cancel("a", CancelReason.SERVER_CANCEL) in actions and isinstance(actions[-1], Reconnect)
    s.connect(T0 + 1)
    s.receive(_welcome(), T0 + 1)
    assert s.in_flight_ids() == [] and s.running == 1  # "a" still unwinding: it holds its slot
    assert _starts(s.receive(_dispatch("c"), T0 + 1)) == []
    done = s.job_finished("a", [OK], T0 + 2)
    assert _sent(done, "result") == [] and _starts(done) == ["c"]


def test_backoff_full_jitter_and_reset_on_welcome() -> None:
    """Delays are rng * min(30, 0.5 * 2^n); the counter resets once a Welcome arrives."""
    s = WorkerSession(_cfg(), backoff=Backoff(rng=lambda: 0.999999))
    ceilings = []
    for _ in range(8):
        s.connect(T0)
        (rec,) = s.connection_lost(Unavailable("x"), T0)
        assert isinstance(rec, Reconnect)
        ceilings.append(round(rec.delay, 2))
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    s.connect(T0)
    s.receive(_welcome(), T0)
    (rec,) = s.connection_lost(None, T0)
    assert isinstance(rec, Reconnect) and rec.delay < 0.5


@given(st.lists(st.floats(min_value=0, max_value=0.999999), min_size=1, max_size=20))
def test_backoff_delay_within_bounds(draws: list[float]) -> None:
    """Every delay lies in [0, min(30, 0.5 * 2^n))."""
    it = iter(draws)
    b = Backoff(rng=lambda: next(it))
    for n in range(len(draws)):
        assert 0 <= b.next_delay() < min(30.0, 0.5 * 2**n)


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("dispatch"), st.integers(0, 9)),
        st.tuples(st.just("batch"), st.integers(0, 9)),
        st.tuples(st.just("finish"), st.integers(0, 9)),
        st.tuples(st.just("cancel"), st.integers(0, 9)),
        st.tuples(st.just("tick"), st.integers(0, 3)),
        st.tuples(st.just("drain"), st.integers(0, 3)),
        st.tuples(st.just("lose"), st.integers(0, 1)),
        st.tuples(st.just("progress"), st.integers(0, 9)),
    ),
    max_size=40,
)


class _Walk:
    """Model of what the machine should have answered, fed by its actions."""

    def __init__(self) -> None:
        self.s = _open(concurrency=2)
        self.now = T0
        self.running: list[str] = []
        self.answered: Counter[str] = Counter()
        self.delivered: Counter[str] = Counter()

    def deliver(self, *ids: str, job_id: str) -> None:
        fresh = not set(ids) & set(self.s.in_flight_ids()) and self.s.job(job_id) is None
        if fresh and self.s.phase is Phase.OPEN:
            self.delivered.update(ids)

    def lose(self, clean: bool) -> None:
        """The stream dies: its deliveries are dropped (never answered); reconnect if told to."""
        self.delivered.subtract(self.s.in_flight_ids())
        actions = self.s.connection_lost(None if clean else Unavailable("x"), self.now)
        if actions and isinstance(actions[-1], Reconnect):
            self.s.connect(self.now)
            self.s.receive(_welcome(), self.now)

    def apply(self, actions: Sequence[Action]) -> None:
        self.running.extend(_starts(actions))
        for m in _sent(actions):
            if m.WhichOneof("frame") == "result":
                self.answered[m.result.task_id] += 1
            elif m.WhichOneof("frame") == "batch_result":
                self.answered.update(r.task_id for r in m.batch_result.results)

    def step(self, op: str, n: int) -> None:
        s = self.s
        if op == "dispatch":
            self.deliver(f"t{n}", job_id=f"t{n}")
            self.apply(s.receive(_dispatch(f"t{n}"), self.now))
        elif op == "batch":
            self.deliver(f"b{n}", f"c{n}", job_id=f"batch:b{n}")
            self.apply(s.receive(_batch(f"b{n}", f"c{n}"), self.now))
        elif op == "finish" and self.running:
            self.apply(s.job_finished(self.running.pop(n % len(self.running)), [OK, OK], self.now))
        elif op == "cancel":
            self.apply(s.receive(_cancel(f"t{n}"), self.now))
        elif op == "tick":
            self.now += n
            self.apply(s.tick(self.now))
        elif op == "drain":
            self.apply(s.drain(self.now, grace=n))
        elif op == "lose":
            self.lose(clean=bool(n))
        elif op == "progress":
            sent = s.progress(f"t{n}", n * 10, "", self.now)
            assert len(sent) <= 1 and (not sent or f"t{n}" in s.in_flight_ids())


@settings(max_examples=150, deadline=None)
@given(_OPS)
def test_random_walk_keeps_gate_and_one_result_per_delivery(ops: list[tuple[str, int]]) -> None:
    """Under any event order: running <= concurrency; each delivery is answered once or still in flight."""
    w = _Walk()
    for op, n in ops:
        w.step(op, n)
        assert w.s.running <= 2 and len(w.running) == w.s.running
        in_flight = set(w.s.in_flight_ids())
        assert all(w.answered[i] + (i in in_flight) == w.delivered[i] for i in w.delivered)
        assert set(w.answered) <= set(w.delivered)


def test_last_frame_names_the_frame_fed_last() -> None:
    """The driver reads it instead of asking protobuf for the oneof a second time."""
    s = WorkerSession(_cfg())
    assert s.last_frame is None
    s.receive(_welcome(), 0.0)
    assert s.last_frame == "welcome"
    s.receive(_dispatch("a"), 0.1)
    assert s.last_frame == "dispatch"
    s.receive(_cancel("a"), 0.2)
    assert s.last_frame == "cancel"
    s.receive(pb.ServerMessage(), 0.3)
    assert s.last_frame is None
