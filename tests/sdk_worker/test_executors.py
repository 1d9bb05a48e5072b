"""LocalExecutor threads, cancellation and abandonment; plugging a custom Executor into Worker."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._transport.clock import ManualClock
from conveyor_sdk.testing import PeerSession, ScriptedPeer
from conveyor_sdk.worker import (
    CancelReason,
    Job,
    JobControl,
    LocalExecutor,
    Outcome,
    OutcomeKind,
    Registry,
    TaskContext,
    TaskData,
    Worker,
)
from tests._util import until
from tests.sdk_worker._helpers import callbacks_queued_so_far


def _job(tid: str, type_: str) -> Job:
    task = TaskData(
        id=tid, queue="q", type=type_, payload=b"", content_type="", metadata={}, retried=0, max_retry=1
    )
    return Job(job_id=tid, queue="q", type=type_, tasks=(task,), batch=False, deadline=None)


def test_thread_pool_gate_and_stubborn_handler_abandoned() -> None:
    """can_start counts busy threads; a sync handler ignoring cancel is reported cancelled after the grace."""
    reg = Registry()
    release = threading.Event()
    entered = threading.Event()

    @reg.handler("stubborn")
    def stubborn(task: TaskData, ctx: TaskContext) -> None:
        entered.set()
        release.wait(30)  # ignores ctx on purpose

    async def main() -> None:
        wakeups: list[int] = []
        ex = LocalExecutor(reg, threads=1, cancel_grace=0.2)
        await ex.start(lambda: wakeups.append(1))
        control = JobControl(report_progress=lambda *a: None)
        run = asyncio.create_task(ex.run(_job("a", "stubborn"), control))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        assert not ex.can_start(_job("b", "stubborn"))
        ex.cancel("a", CancelReason.DEADLINE)
        out = await asyncio.wait_for(run, 10)
        assert out[0].cancelled
        assert not ex.can_start(_job("b", "stubborn"))  # the abandoned thread still holds the slot
        release.set()
        await asyncio.wait_for(ex.close(5), 10)
        assert wakeups and ex.can_start(_job("b", "stubborn"))

    asyncio.run(main())


class RecordingExecutor:
    """A custom executor: refuses to start until allowed, then runs everything as SUCCESS."""

    def __init__(self) -> None:
        self.allowed = False
        self.ran: list[str] = []
        self.wakeup: Callable[[], None] = lambda: None
        self.closed = False

    async def start(self, wakeup: Callable[[], None]) -> None:
        self.wakeup = wakeup

    def can_start(self, job: Job) -> bool:
        return self.allowed

    async def run(self, job: Job, control: JobControl) -> list[Outcome]:
        self.ran.append(job.job_id)
        return [Outcome(OutcomeKind.SUCCESS, result=b"custom") for _ in job.tasks]

    def cancel(self, job_id: str, reason: CancelReason) -> None:
        pass

    async def close(self, grace: float) -> None:
        self.closed = True


async def _welcomed_with_one_dispatch(
    peer: ScriptedPeer, task_id: str, *, heartbeat_ms: int, lease_ms: int
) -> PeerSession:
    """Accept the worker's session, take its Hello, send a Welcome with these timings, then one
    Dispatch of ``task_id`` (type "anything", queue "default")."""
    sess = await peer.accept()
    await sess.recv()
    welcome = pb.ServerMessage()
    welcome.welcome.heartbeat_interval.FromMilliseconds(heartbeat_ms)
    welcome.welcome.lease_ttl.FromMilliseconds(lease_ms)
    await sess.send(welcome)
    msg = pb.ServerMessage()
    msg.dispatch.task.CopyFrom(tpb.TaskEnvelope(id=task_id, queue="default", type="anything"))
    await sess.send(msg)
    return sess


def test_worker_uses_a_pluggable_executor_and_its_wakeup() -> None:
    """Worker(executor=...) parks a job the executor refuses and starts it on the executor's wakeup."""
    ex = RecordingExecutor()

    async def main() -> None:
        async with ScriptedPeer() as peer:
            worker = Worker(peer.url, executor=ex, close_timeout=0.5)
            run = asyncio.create_task(worker.run(Registry()))
            sess = await _welcomed_with_one_dispatch(peer, "X", heartbeat_ms=100, lease_ms=300)
            hb = await sess.recv()
            assert hb is not None and list(hb.heartbeat.active_task_ids) == ["X"]
            assert ex.ran == [] and worker.statistics()["parked"] == 1
            ex.allowed = True
            ex.wakeup()
            while True:
                got = await sess.recv()
                assert got is not None
                if got.WhichOneof("frame") == "result":
                    break
            assert (got.result.task_id, got.result.result) == ("X", b"custom")
            worker.stop()
            await asyncio.wait_for(run, 10)
        assert ex.ran == ["X"] and ex.closed

    asyncio.run(main())


@pytest.mark.parametrize("from_thread", [False, True], ids=["loop-thread", "other-thread"])
def test_a_wakeup_starts_the_parked_job_from_the_loop_thread_or_another(from_thread: bool) -> None:
    """The wakeup alone starts a parked job (in virtual time: no timer does), whether the executor
    calls it on the loop's thread (posted directly) or from another thread (through the loop).
    Three wakeups in a row: the job runs once."""
    ex = RecordingExecutor()

    async def main() -> None:
        async with ScriptedPeer() as peer:
            # Virtual time: no timer of the worker fires, so only the wakeup can start the job.
            clock = ManualClock()
            worker = Worker(peer.url, executor=ex, close_timeout=0.5, clock=clock)
            run = asyncio.create_task(worker.run(Registry()))
            sess = await _welcomed_with_one_dispatch(peer, "W", heartbeat_ms=30_000, lease_ms=90_000)
            await until(lambda: worker.statistics()["parked"] == 1, what="the job parked")
            ex.allowed = True

            answered = threading.Event()

            def wake_thrice() -> None:
                for _ in range(3):
                    ex.wakeup()
                answered.wait(20)  # the thread's end must not be what wakes the loop

            if from_thread:
                thread = threading.Thread(target=wake_thrice)
                thread.start()
            else:
                answered.set()
                wake_thrice()
            while True:
                got = await sess.recv(10)
                assert got is not None
                if got.WhichOneof("frame") == "result":
                    break
            answered.set()
            if from_thread:
                thread.join(10)
            assert (got.result.task_id, got.result.result) == ("W", b"custom")
            worker.stop(immediate=True)
            async with asyncio.timeout(20):  # virtual time moves on: the close timeout is a timer
                while not run.done():
                    await clock.advance(1.0)
                    await asyncio.wait({run}, timeout=0.05)
            await run
        assert ex.ran == ["W"]

    asyncio.run(main())


def test_close_waits_for_running_jobs_up_to_the_grace_then_cancels_them_as_drain() -> None:
    """close(grace): a job that ends within the grace keeps its result; one that does not is cancelled."""
    reg = Registry()
    gate = asyncio.Event()
    entered = {"a": asyncio.Event(), "b": asyncio.Event()}

    @reg.handler("soon")
    async def soon(task: TaskData, ctx: TaskContext) -> bytes:
        entered[task.id].set()
        await gate.wait()
        return b"finished"

    @reg.handler("never")
    async def never(task: TaskData, ctx: TaskContext) -> None:
        entered[task.id].set()
        await asyncio.Event().wait()  # until cancelled

    async def main() -> None:
        ex = LocalExecutor(reg, threads=1, cancel_grace=5)
        await ex.start(lambda: None)
        control = JobControl(report_progress=lambda *a: None)
        first = asyncio.ensure_future(ex.run(_job("a", "soon"), control))
        await asyncio.wait_for(entered["a"].wait(), 10)
        closing = asyncio.ensure_future(ex.close(30))
        await callbacks_queued_so_far()  # close took its first step
        assert not closing.done()  # a job runs: close waits for it
        gate.set()
        await asyncio.wait_for(closing, 10)
        assert (await first)[0] == Outcome(OutcomeKind.SUCCESS, result=b"finished")

        ex = LocalExecutor(reg, threads=1, cancel_grace=5)
        await ex.start(lambda: None)
        second = asyncio.ensure_future(ex.run(_job("b", "never"), control))
        await asyncio.wait_for(entered["b"].wait(), 10)
        await asyncio.wait_for(ex.close(0.05), 10)  # the grace ends: DRAIN
        out = await second
        assert out[0].cancelled

    asyncio.run(main())
