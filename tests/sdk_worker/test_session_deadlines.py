"""The session machine's deadline floor: ticks and next_deadline() answer as a walk of every job does."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

from hypothesis import example, given, settings
from hypothesis import strategies as st

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._protocol.actions import PlainOutcome
from conveyor_sdk._protocol.backoff import Backoff
from conveyor_sdk._protocol.hello import SessionConfig
from conveyor_sdk._protocol.session import Action, CanStart, Reconnect, Start, WorkerSession, _always
from conveyor_sdk._protocol.types import OutcomeKind
from conveyor_sdk.errors import Unavailable
from tests._frames import welcome

T0 = 1_000_000.0
OK = PlainOutcome(OutcomeKind.SUCCESS)
_T = TypeVar("_T")


class _Walker(WorkerSession):
    """The same machine, made to walk every job whenever it is asked for deadlines (no floor)."""

    def next_deadline(self) -> float | None:
        self._due_floor = -math.inf
        return super().next_deadline()

    def tick(self, now: float, can_start: CanStart = _always) -> list[Action]:
        self._due_floor = -math.inf
        return super().tick(now, can_start)


_welcome = partial(welcome, "S1", 3, 1)


def _dispatch(tid: str, deadline: float | None, timeout: float | None) -> pb.ServerMessage:
    msg = pb.ServerMessage()
    task = msg.dispatch.task
    task.id, task.queue, task.type = tid, "default", "t"
    if deadline is not None:
        task.options.deadline.FromNanoseconds(int(deadline * 1e9))
    if timeout is not None:
        task.options.timeout.FromNanoseconds(int(timeout * 1e9))
    return msg


def _cancel(tid: str) -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.cancel.task_id = tid
    return msg


_BOUND = st.one_of(st.none(), st.sampled_from([0.5, 1.5, 2.5, 4.0, 7.0]))
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("dispatch"), st.integers(0, 9), _BOUND, _BOUND),
        st.tuples(st.just("finish"), st.integers(0, 9), st.none(), st.none()),
        st.tuples(st.just("cancel"), st.integers(0, 9), st.none(), st.none()),
        st.tuples(st.just("tick"), st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 3.5]), st.none(), st.none()),
        st.tuples(st.just("due"), st.integers(0, 0), st.none(), st.none()),
        st.tuples(st.just("drain"), st.integers(0, 3), st.none(), st.none()),
        st.tuples(st.just("lose"), st.integers(0, 1), st.none(), st.none()),
    ),
    max_size=50,
)


_Op = tuple[str, float, float | None, float | None]  # name, argument, task deadline and timeout (s)


class _Twins:
    """One event sequence fed to the machine and to the walker; every answer must be the same."""

    def __init__(self) -> None:
        self.now = T0
        self.machines: list[WorkerSession] = []
        for cls in (WorkerSession, _Walker):
            cfg = SessionConfig.build(queues=["default"], concurrency=2, sdk_version="x")
            self.machines.append(cls(cfg, backoff=Backoff(rng=lambda: 0.5)))
        self.running: list[str] = []
        self.both(lambda m: m.connect(self.now))
        self.both(lambda m: m.receive(_welcome(), self.now))

    def both(self, call: Callable[[WorkerSession], _T]) -> _T:
        """``call`` on each machine: the same answer from both (actions compared by their repr)."""
        mine, walked = (call(m) for m in self.machines)
        assert repr(mine) == repr(walked)
        if isinstance(mine, list):
            self.running += [a.delivery.job_id for a in mine if isinstance(a, Start)]
        return mine

    def step(self, op: str, n: float, deadline: float | None, timeout: float | None) -> None:
        if op == "dispatch":
            when = None if deadline is None else self.now + deadline
            self.both(lambda m: m.receive(_dispatch(f"t{n}", when, timeout), self.now))
        elif op == "finish" and self.running:
            job = self.running.pop(int(n) % len(self.running))
            self.both(lambda m: m.job_finished(job, [OK], self.now))
        elif op == "cancel":
            self.both(lambda m: m.receive(_cancel(f"t{n}"), self.now))
        elif op == "tick":
            self.now += n
            self.both(lambda m: m.tick(self.now))
        elif op == "due":  # the driver's wait: sleep until the machine's next deadline, then tick
            due = self.both(lambda m: m.next_deadline())
            self.now = max(self.now, due or self.now)
            self.both(lambda m: m.tick(self.now))
        elif op == "drain":
            self.both(lambda m: m.drain(self.now, grace=n))
        elif op == "lose":
            error = None if n else Unavailable("x")
            actions = self.both(lambda m: m.connection_lost(error, self.now))
            if actions and isinstance(actions[-1], Reconnect):
                self.both(lambda m: m.connect(self.now))
                self.both(lambda m: m.receive(_welcome(), self.now))
        self.both(lambda m: m.next_deadline())


_PARKED_FIRST: list[_Op] = [  # a delivery parked with a task deadline sooner than every running job's
    ("dispatch", 0, None, None),
    ("dispatch", 1, None, None),
    ("dispatch", 2, 0.5, None),
    ("due", 0, None, None),
]


@settings(max_examples=300, deadline=None)
@given(_OPS)
@example(_PARKED_FIRST)
def test_deadlines_match_a_walk_of_every_job(ops: Sequence[_Op]) -> None:
    """Timeouts, task deadlines, lease expiries, heartbeats, drains and reconnects, in any order:
    the machine's actions and next_deadline() equal those of a machine that walks every job."""
    twins = _Twins()
    for op in ops:
        twins.step(*op)
