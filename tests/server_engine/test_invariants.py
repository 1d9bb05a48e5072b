"""Hypothesis walks random operation sequences through the engine, checking invariants after each step."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conveyor_server_min._engine.clock import FakeClock
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.model import State, Task
from conveyor_server_min._engine.sessions import Action, DispatchAction, SessionState
from conveyor_server_min.service_api import EngineConfig

QUEUES = ("a", "b", "c")
OPS = st.one_of(
    st.tuples(st.just("enqueue"), st.sampled_from(QUEUES), st.integers(1, 9)),
    st.tuples(st.just("open"), st.sampled_from(QUEUES), st.integers(1, 3)),
    st.tuples(st.just("open2"), st.integers(1, 4), st.integers(1, 3)),
    st.tuples(st.just("close"), st.integers(0, 9), st.just(0)),
    st.tuples(st.just("result"), st.integers(0, 99), st.integers(0, 4)),
    st.tuples(st.just("heartbeat"), st.integers(0, 9), st.just(0)),
    st.tuples(st.just("credit"), st.integers(0, 9), st.integers(1, 3)),
    st.tuples(st.just("advance"), st.sampled_from((0.5, 1.0, 3.0)), st.just(0)),
    st.tuples(st.just("pause"), st.sampled_from(QUEUES), st.booleans()),
)


class Model:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.engine = Engine(EngineConfig(lease_ttl=2.0), clock=self.clock, rand=lambda: 0.5)
        self.sessions: list[SessionState] = []
        self.sent: dict[str, list[Action]] = {}
        self.n = 0

    def _open(self, queues: dict[str, int], concurrency: int) -> None:
        box: list[Action] = []
        session = self.engine.open_session(queues=queues, concurrency=concurrency, sink=box.append)
        self.sent[session.id] = box
        self.sessions.append(session)
        self.engine.start_session(session)

    def apply(self, op: str, x: object, y: object) -> None:
        eng = self.engine
        live = [s for s in self.sessions if s.id in eng.dispatcher.sessions]
        if op == "enqueue":
            self.n += 1
            eng.enqueue(Task(id=f"t{self.n:05d}", queue=str(x), type="t", enqueued_at=0, priority=int(y)))  # type: ignore[call-overload]
        elif op == "open":
            self._open({str(x): 1}, int(y))  # type: ignore[call-overload]
        elif op == "open2":
            self._open({"a": int(x), "b": 1, "c": 2}, int(y))  # type: ignore[call-overload]
        elif op == "close" and live:
            eng.close_session(live[int(x) % len(live)])  # type: ignore[call-overload]
        elif op == "result" and live:
            session = live[int(x) % len(live)]  # type: ignore[call-overload]
            if session.by_task:
                task_id = sorted(session.by_task)[int(x) % len(session.by_task)]  # type: ignore[call-overload]
                eng.result(session, task_id, int(y), "e", b"")  # type: ignore[call-overload]
        elif op == "heartbeat" and live:
            session = live[int(x) % len(live)]  # type: ignore[call-overload]
            eng.heartbeat(session, sorted(session.by_task)[::2])
        elif op == "credit" and live:
            session = live[int(x) % len(live)]  # type: ignore[call-overload]
            eng.credit(session, min(int(y), session.concurrency))  # type: ignore[call-overload]
        elif op == "advance":
            self.clock.advance(float(x))  # type: ignore[arg-type]
            eng.reap()
            eng.promote()
            eng.wake_due()
        elif op == "pause":
            eng.broker.set_paused(str(x), bool(y))
            eng.wake_due()

    def check(self) -> None:
        eng = self.engine
        tasks = [eng.broker.get(f"t{i:05d}") for i in range(1, self.n + 1)]
        recount: Counter[tuple[str, int]] = Counter((t.queue, int(t.state)) for t in tasks if t is not None)
        for queue, counts in eng.broker.counts().items():
            for state in range(1, 10):
                assert counts[state] == recount[(queue, state)], (queue, state)
        has_work = eng.dispatcher._has_work
        for session in eng.dispatcher.sessions.values():
            assert 0 <= len(session.deliveries) <= session.concurrency
            assert set(session.work) == {q for q in session.queues if q in has_work}, "work index"
        for task in tasks:
            if task is not None and task.state is State.ACTIVE:
                holder = eng.dispatcher.sessions[task.session_id]
                assert holder.by_task[task.id].members[task.id] == task.lease_id
        now = self.clock.now()
        for queue in QUEUES:
            head = None if eng.broker.is_paused(queue) else eng.broker.peek_ready(queue, now)
            if head is None:
                continue
            # the one documented exception: a lapsed task is not handed straight back to its session
            serving = [
                s
                for s in eng.dispatcher.serving(queue)
                if s.free > 0 and not eng.dispatcher.declines(s, head)
            ]
            assert not serving, f"work-conserving: {queue} has ready work and a free session"
        for box in self.sent.values():
            ids = [a.task.id for a in box if isinstance(a, DispatchAction)]
            assert all(i.startswith("t") for i in ids)


# Found by this test: the weighted pick chose queue a, whose only ready task had lapsed in the session, and
# queue b's new task was left ready beside a free slot.
LAPSED_HEAD_ELSEWHERE = [("enqueue", "a", 1), ("open2", 1, 2), ("advance", 3.0, 0), ("enqueue", "b", 1)]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=60))
@example(LAPSED_HEAD_ELSEWHERE)
def test_engine_invariants_hold_for_random_operation_sequences(ops: list[tuple[str, object, object]]) -> None:
    """Counts match rows, no session exceeds its concurrency, ACTIVE tasks belong to their session, and
    dispatch is work-conserving."""
    model = Model()
    for op, x, y in ops:
        model.apply(op, x, y)
        model.check()


def test_a_lapsed_task_on_one_queue_does_not_idle_a_slot_another_queue_could_use() -> None:
    """The session's free slot takes queue b's new task although the weighted pick lands on queue a, whose
    only ready task lapsed in that session."""
    model = Model()
    for op, x, y in LAPSED_HEAD_ELSEWHERE:
        model.apply(op, x, y)
    session = model.sessions[0]
    sent = [a.task.id for a in model.sent[session.id] if isinstance(a, DispatchAction)]
    assert sent == ["t00001", "t00002"]
    model.check()
