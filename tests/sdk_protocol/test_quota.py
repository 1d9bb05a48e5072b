"""The quota rule alone, and the session machine sharing slots by weight against simulated servers."""

from __future__ import annotations

import heapq
import itertools
from collections import Counter

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._protocol.actions import PlainOutcome, Send, Start
from conveyor_sdk._protocol.hello import SessionConfig
from conveyor_sdk._protocol.quota import Quota, apportion
from conveyor_sdk._protocol.session import WorkerSession
from conveyor_sdk._protocol.types import OutcomeKind

T0 = 1_000_000.0
OK = PlainOutcome(OutcomeKind.SUCCESS)


# -- the rule -------------------------------------------------------------------------------------
def test_apportion_splits_by_largest_remainder() -> None:
    """4 slots at 3:1 -> 3 and 1; 10 at 6:3:1 -> 6, 3, 1; nothing to split -> zeros."""
    assert apportion(4, {"a": 3, "b": 1}) == {"a": 3, "b": 1}
    assert apportion(10, {"x": 6, "y": 3, "z": 1}) == {"x": 6, "y": 3, "z": 1}
    assert apportion(0, {"a": 1}) == {"a": 0}


def test_queue_below_quota_always_takes_a_free_slot() -> None:
    """a=3 b=1 on 4, a running 3: the free slot goes to waiting b, and a may not borrow it."""
    q = Quota({"a": 3, "b": 1}, 4)
    for _ in range(3):
        q.started("a")
    assert q.choose(["a", "b"], {"a", "b"}, 1, T0, False) == "b"
    assert not q.admits("a", 1, {"b"}, T0, False)  # b waits and is below its quota


def test_turns_follow_the_weights_in_starts() -> None:
    """a=3 b=1, both always ready on 4 slots that free at once: the starts go 3:1."""
    q = Quota({"a": 3, "b": 1}, 4)
    picks = []
    for _ in range(40):
        pick = q.choose(["a", "b"], {"a", "b"}, 4 - sum(q.running.values()), T0, False)
        assert pick is not None
        q.started(pick)
        picks.append(pick)
        if sum(q.running.values()) == 4:
            for queue in list(q.running):
                while q.running[queue]:
                    q.ended(queue, T0)
    assert Counter(picks) == {"a": 30, "b": 10}


def test_idle_slots_are_lent_when_nobody_else_waits_or_is_expected() -> None:
    """b (quota 1) may take all 4 slots when a has nothing parked and nothing is expected."""
    q = Quota({"a": 3, "b": 1}, 4)
    for free in (4, 3, 2, 1):
        assert q.admits("b", free, (), T0, False)
        q.started("b")


def test_a_slot_is_held_for_an_expected_queue_only_while_the_server_over_delivers() -> None:
    """After a's job ends, b may not borrow a's slot for `hold` s if the server over-delivers."""
    q = Quota({"a": 3, "b": 1}, 4, hold=0.1)
    for queue in "aaab":
        q.started(queue)
    q.ended("a", T0)
    assert not q.admits("b", 1, {"b"}, T0 + 0.05, True)  # a's refill is on its way
    assert q.admits("b", 1, {"b"}, T0 + 0.05, False)  # a total-credit server: work-conserving
    assert q.admits("b", 1, {"b"}, T0 + 0.1, True)  # the expectation lapsed: a had no backlog
    assert q.next_lapse() == pytest.approx(T0 + 0.1)
    q.prune(T0 + 0.1)
    assert q.next_lapse() is None


def test_every_declared_queue_is_expected_right_after_the_welcome() -> None:
    """In the first `hold` s after Welcome, b cannot borrow the slots of a, whose first tasks come."""
    q = Quota({"a": 3, "b": 1}, 4, hold=0.1)
    q.opened(T0)
    q.started("b")
    assert not q.admits("b", 3, (), T0, False)
    assert q.admits("b", 3, (), T0 + 0.1, False)


def test_fewer_slots_than_queues_still_serves_each_by_weight() -> None:
    """a=3 b=1 on one slot: both are below their quota (0.75, 0.25); starts go 3:1."""
    q = Quota({"a": 3, "b": 1}, 1)
    picks = []
    for _ in range(8):
        pick = q.choose(["a", "b"], {"a", "b"}, 1, T0, True)
        assert pick is not None
        q.started(pick)
        q.ended(pick, T0)
        picks.append(pick)
    assert Counter(picks) == {"a": 6, "b": 2}


def test_an_undeclared_queue_is_served_with_weight_one() -> None:
    """A delivery of a queue the Hello did not name gets a weight-1 quota."""
    q = Quota({"a": 1}, 2)
    q.add("x")
    assert q.below("x") and q.quota("x") == pytest.approx(1.0)


# -- the machine against simulated servers (virtual time) -------------------------------------------
class _Sim:
    """One WorkerSession against a simulated server with an endless backlog on every queue.

    ``per_queue``: the server grants ``concurrency`` credits per queue (upstream conveyord),
    else ``concurrency`` in total, filled by smooth weighted round-robin (the reference server).
    Frames take ``rtt / 2`` each way; each task runs ``run`` seconds.
    """

    def __init__(self, weights: dict[str, int], concurrency: int, *, per_queue: bool,
                 rtt: float = 0.002, run: float = 0.001, early: bool = False) -> None:  # fmt: skip
        cfg = SessionConfig.build(queues=weights, concurrency=concurrency, sdk_version="conveyor-py/0.1.0")
        self.s = WorkerSession(cfg)
        self.weights, self.concurrency, self.per_queue = weights, concurrency, per_queue
        self.rtt, self.run = rtt, run
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = itertools.count()
        self.ids = itertools.count()
        self.starts: list[str] = []
        self.in_flight = dict.fromkeys(weights, 0)
        self.current = dict.fromkeys(weights, 0)
        self.now = T0
        self.s.connect(T0)
        welcome = pb.ServerMessage()
        welcome.welcome.session_id = "S"
        welcome.welcome.lease_ttl.FromSeconds(60)
        # conveyord registers the session with its queues before it writes the Welcome
        if not early:
            self._at(T0 + rtt / 2, "frame", welcome)
        for _ in range(concurrency):
            for queue in sorted(weights, key=lambda q: weights[q]):  # the lighter queue's first
                if per_queue:
                    self._dispatch(T0, queue)
        if not per_queue:
            for _ in range(concurrency):
                self._dispatch(T0, self._swrr())
        if early:
            self._at(T0 + rtt, "frame", welcome)

    def _at(self, when: float, kind: str, what: object) -> None:
        heapq.heappush(self.events, (when, next(self.seq), kind, what))

    def _swrr(self) -> str:
        total = sum(self.weights.values())
        for q, w in self.weights.items():
            self.current[q] += w
        best = max(self.weights, key=lambda q: self.current[q])
        self.current[best] -= total
        return best

    def _dispatch(self, now: float, queue: str) -> None:
        self.in_flight[queue] += 1
        msg = pb.ServerMessage()
        msg.dispatch.task.CopyFrom(tpb.TaskEnvelope(id=f"{queue}-{next(self.ids)}", queue=queue, type="t"))
        self._at(now + self.rtt / 2, "frame", msg)

    def _server_result(self, now: float, task_id: str) -> None:
        queue = task_id.split("-", maxsplit=1)[0]
        self.in_flight[queue] -= 1
        self._dispatch(now, queue if self.per_queue else self._swrr())

    def _apply(self, actions: list[object]) -> None:
        for action in actions:
            if isinstance(action, Start):
                self.starts.append(action.delivery.queue)
                self._at(self.now + self.run, "done", action.delivery.job_id)
            elif isinstance(action, Send) and action.message.WhichOneof("frame") == "result":
                self._at(self.now + self.rtt / 2, "result", action.message.result.task_id)

    def starts_until(self, count: int) -> list[str]:
        while len(self.starts) < count:
            due = self.s.next_deadline()
            if due is not None and (not self.events or due < self.events[0][0]):
                self.now = max(self.now, due)
                self._apply(self.s.tick(self.now))
                continue
            self.now, _, kind, what = heapq.heappop(self.events)
            if kind == "frame":
                self._apply(self.s.receive(what, self.now))  # type: ignore[arg-type]
            elif kind == "done":
                self._apply(self.s.job_finished(what, [OK], self.now))  # type: ignore[arg-type]
            else:
                self._server_result(self.now, what)  # type: ignore[arg-type]
        return self.starts[:count]


@pytest.mark.parametrize("early", [False, True], ids=["welcome-first", "dispatch-first"])
@pytest.mark.parametrize("per_queue", [True, False], ids=["per-queue-credits", "total-credits"])
def test_weighted_share_of_the_first_40_starts(per_queue: bool, early: bool) -> None:
    """wa=3 wb=1, concurrency 4, both backlogged: wa gets 0.75 +- 0.05 of the first 40 starts."""
    sim = _Sim({"wa": 3, "wb": 1}, 4, per_queue=per_queue, early=early and per_queue)
    share = sim.starts_until(40).count("wa") / 40
    assert abs(share - 0.75) <= 0.05, share


@pytest.mark.parametrize(("rtt", "run"), [(0.002, 0.001), (0.0005, 0.01), (0.02, 0.002)])
def test_per_queue_credits_share_holds_for_other_round_trips_and_run_times(rtt: float, run: float) -> None:
    """The share holds whether the refill is faster or slower than a task (within the hold)."""
    sim = _Sim({"wa": 3, "wb": 1}, 4, per_queue=True, rtt=rtt, run=run)
    share = sim.starts_until(200).count("wa") / 200
    assert abs(share - 0.75) <= 0.05, share
