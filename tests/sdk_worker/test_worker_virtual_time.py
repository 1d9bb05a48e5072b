"""The running Worker's timers in virtual time (a ManualClock): heartbeats that carry a long job past
its lease, task timeouts, the Welcome wait and reconnect backoff, over a real HTTP/2 scripted peer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._transport.clock import ManualClock
from conveyor_sdk.errors import Code
from conveyor_sdk.testing import PeerSession, ScriptedPeer
from conveyor_sdk.worker import CancelReason, Registry, SkipRetry, TaskContext, TaskData, Worker
from tests._util import until

LEASE = 2.0  # as the reference server's --lease-ttl in tests/conftest.py's FAST_ARGS


def _welcome(ttl: float = LEASE) -> pb.ServerMessage:
    msg = pb.ServerMessage()  # no heartbeat_interval: the worker beats every lease_ttl / 3
    msg.welcome.session_id = "S-virtual"
    msg.welcome.lease_ttl.FromMilliseconds(int(ttl * 1000))
    return msg


def _envelope(tid: str, type_: str, timeout: float | None = None) -> tpb.TaskEnvelope:
    env = tpb.TaskEnvelope(id=tid, queue="default", type=type_)
    if timeout is not None:
        env.options.timeout.FromMilliseconds(int(timeout * 1000))
    return env


def _dispatch(tid: str, type_: str, timeout: float | None = None) -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.dispatch.task.CopyFrom(_envelope(tid, type_, timeout))
    return msg


async def _frame(sess: PeerSession, timeout: float = 10.0) -> tuple[str, pb.WorkerMessage]:
    msg = await sess.recv(timeout)
    assert msg is not None, "the worker half-closed unexpectedly"
    kind = msg.WhichOneof("frame")
    assert kind is not None
    return kind, msg


async def _open(peer: ScriptedPeer) -> PeerSession:
    sess = await peer.accept(timeout=10)
    kind, _ = await _frame(sess)
    assert kind == "hello"
    return sess


async def _outlive_the_lease(sess: PeerSession, clock: ManualClock, ids: list[str], seconds: float) -> None:
    """Move virtual time ``seconds`` forward, a third of the lease at a time: each step must bring
    exactly one Heartbeat listing ``ids`` and nothing else, so no lease can lapse meanwhile."""
    step, moved = LEASE / 3, 0.0
    while moved < seconds:
        await clock.advance(step)
        moved += step
        kind, msg = await _frame(sess)
        assert kind == "heartbeat", f"at +{moved:.2f}s: {msg}"
        assert sorted(msg.heartbeat.active_task_ids) == sorted(ids)
    with pytest.raises(TimeoutError):  # and no frame while time stands still
        await sess.recv(0.2)


def _with_worker(
    script: Callable[[ScriptedPeer, Worker, ManualClock], Awaitable[None]],
    registry: Registry,
    **kwargs: Any,
) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with ScriptedPeer() as peer:
            worker = Worker(peer.url, close_timeout=0.5, clock=clock, **kwargs)
            run = asyncio.create_task(worker.run(registry))
            try:
                await script(peer, worker, clock)
            finally:
                await _stop(worker, run, clock)

    asyncio.run(main())


async def _stop(worker: Worker, run: asyncio.Task[None], clock: ManualClock) -> None:
    """Stop at once; virtual time moves on meanwhile (the close timeout after our half-close is
    one of the driver's timers)."""
    if not run.done():
        worker.stop(immediate=True)
    async with asyncio.timeout(20):
        while not run.done():
            await clock.advance(1.0)
            await asyncio.wait({run}, timeout=0.05)
    await asyncio.gather(run, return_exceptions=True)


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_5s_handler_under_a_2s_lease_is_heartbeated_throughout(kind: str) -> None:
    """A handler running 5 (virtual) seconds under a 2 s lease is listed in a Heartbeat every
    lease / 3, then reports one SUCCESS (tests/sdk_worker/test_worker_e2e.py runs the real-time
    twin against the reference server)."""
    reg = Registry()
    release, started = threading.Event(), threading.Event()
    if kind == "async":

        @reg.handler("long")
        async def long_async(task: TaskData, ctx: TaskContext) -> bytes:
            started.set()
            await asyncio.to_thread(release.wait, 20)
            return b"done"
    else:

        @reg.handler("long")
        def long_sync(task: TaskData, ctx: TaskContext) -> bytes:
            started.set()
            assert release.wait(20)
            return b"done"

    async def script(peer: ScriptedPeer, worker: Worker, clock: ManualClock) -> None:
        sess = await _open(peer)
        await sess.send(_welcome())
        await sess.send(_dispatch("L", "long"))
        await until(started.is_set, timeout=10, what="the handler started")
        await _outlive_the_lease(sess, clock, ["L"], 5.0)
        release.set()
        kind, msg = await _frame(sess)
        assert kind == "result" and (msg.result.task_id, msg.result.outcome) == ("L", pb.TASK_OUTCOME_SUCCESS)
        assert msg.result.result == b"done"

    _with_worker(script, reg)


def test_a_3s_group_batch_under_a_2s_lease_is_heartbeated_throughout() -> None:
    """A 3-member group batch running 3 (virtual) seconds under a 2 s lease: every member is in
    every Heartbeat, one BatchResult follows (the real-time twin: test_worker_e2e.py)."""
    reg = Registry()
    release = asyncio.Event()
    calls: list[tuple[str, ...]] = []

    @reg.batch_handler("agg")
    async def agg(tasks: list[TaskData], ctx: TaskContext) -> dict[str, Any]:
        calls.append(ctx.ids)
        await release.wait()
        return {tasks[1].id: SkipRetry("second is bad")}

    async def script(peer: ScriptedPeer, worker: Worker, clock: ManualClock) -> None:
        sess = await _open(peer)
        await sess.send(_welcome())
        batch = pb.ServerMessage()
        batch.batch_dispatch.group = "g1"
        batch.batch_dispatch.tasks.extend(_envelope(i, "agg") for i in ("A", "B", "C"))
        await sess.send(batch)
        await until(lambda: bool(calls), timeout=10, what="the batch started")
        await _outlive_the_lease(sess, clock, ["A", "B", "C"], 3.0)
        release.set()
        kind, msg = await _frame(sess)
        assert kind == "batch_result"
        results = msg.batch_result.results
        assert [(r.task_id, r.outcome) for r in results] == [
            ("A", pb.TASK_OUTCOME_SUCCESS),
            ("B", pb.TASK_OUTCOME_SKIP_RETRY),
            ("C", pb.TASK_OUTCOME_SUCCESS),
        ]
        assert "second is bad" in results[1].error_msg
        assert calls == [("A", "B", "C")]

    _with_worker(script, reg, concurrency=1)


def test_a_task_timeout_cancels_the_handler_when_virtual_time_reaches_it() -> None:
    """A 1.5 s TaskOptions.timeout: nothing at +1.4 s; at +1.5 s the handler's signal fires with
    DEADLINE and a RETRY result says "deadline exceeded" (real-time twin: test_worker_e2e.py)."""
    reg = Registry()
    reasons: list[CancelReason | None] = []

    @reg.handler("slow")
    async def slow(task: TaskData, ctx: TaskContext) -> None:
        try:
            await asyncio.sleep(30)  # wall-clock: only the deadline's cancel ends it
        finally:
            reasons.append(ctx.cancel_reason)

    async def script(peer: ScriptedPeer, worker: Worker, clock: ManualClock) -> None:
        sess = await _open(peer)
        await sess.send(_welcome(ttl=60.0))
        await sess.send(_dispatch("T", "slow", timeout=1.5))
        await until(lambda: worker.statistics()["jobs_started"] == 1, timeout=10, what="started")
        await clock.advance(1.4)
        with pytest.raises(TimeoutError):
            await sess.recv(0.2)
        assert reasons == []
        await clock.advance(0.1)
        kind, msg = await _frame(sess)
        assert kind == "result" and msg.result.task_id == "T", msg
        assert msg.result.outcome == pb.TASK_OUTCOME_RETRY and "deadline exceeded" in msg.result.error_msg
        assert reasons == [CancelReason.DEADLINE]

    _with_worker(script, reg)


def test_a_node_that_never_welcomes_costs_one_setup_timeout_of_virtual_time() -> None:
    """Two addresses, setup_timeout 2 s, the first never welcomes: the worker stays on it until
    virtual time reaches 2 s, then opens a session with the second at once."""

    async def main() -> None:
        clock = ManualClock()
        async with ScriptedPeer() as silent, ScriptedPeer() as good:
            worker = Worker([silent.url, good.url], setup_timeout=2.0, close_timeout=0.5, clock=clock)
            run = asyncio.create_task(worker.run(Registry()))
            try:
                await _open(silent)
                await clock.advance(1.9)
                with pytest.raises(TimeoutError):
                    await good.accept(timeout=0.3)
                await clock.advance(0.1)
                sess = await _open(good)
                await sess.send(_welcome())
                await until(lambda: worker.phase == "open", timeout=10, what="the second session")
                assert worker.server == good.url
            finally:
                await _stop(worker, run, clock)

    asyncio.run(main())


def test_reconnect_waits_its_backoff_in_virtual_time() -> None:
    """A session the server ends as unavailable is reopened after the drawn backoff (base 0.5 s,
    jitter 1.0: 0.5 s) and not before."""

    async def script(peer: ScriptedPeer, worker: Worker, clock: ManualClock) -> None:
        sess = await _open(peer)
        await sess.send(_welcome())
        await until(lambda: worker.phase == "open", timeout=10, what="the session")
        await sess.end(Code.UNAVAILABLE, "going down")
        await until(lambda: worker.statistics()["reconnects"] == 1, timeout=10, what="a reconnect wait")
        with pytest.raises(TimeoutError):
            await peer.accept(timeout=0.3)
        await clock.advance(0.49)
        with pytest.raises(TimeoutError):
            await peer.accept(timeout=0.3)
        await clock.advance(0.01)
        await _open(peer)

    _with_worker(script, Registry(), rng=lambda: 0.999999, reconnect_base=0.5)


def test_the_driver_follows_the_injected_clock_not_the_wall_clock() -> None:
    """A 0.3 s lease (a Heartbeat due every 0.1 s): while virtual time stands still for 0.5 s of
    wall-clock time no Heartbeat comes; moving it 0.1 s brings one at once."""

    async def script(peer: ScriptedPeer, worker: Worker, clock: ManualClock) -> None:
        sess = await _open(peer)
        await sess.send(_welcome(ttl=0.3))
        await until(lambda: worker.phase == "open", timeout=10, what="the session")
        with pytest.raises(TimeoutError):
            await sess.recv(0.5)
        await clock.advance(0.1)
        kind, _ = await _frame(sess)
        assert kind == "heartbeat"

    _with_worker(script, Registry())
