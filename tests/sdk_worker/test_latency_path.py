"""The start path of a Dispatch: handled in the socket read's own turn when the worker is idle, in order."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections.abc import Callable
from functools import partial

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._h2kernel import eager, probe
from conveyor_sdk._protocol.framing import encode_frame
from conveyor_sdk._worker.events import JobDone
from conveyor_sdk._worker.executor import CancelReason, Executor, Job, JobControl, Outcome, OutcomeKind
from conveyor_sdk._worker.jobs import Jobs, Run
from conveyor_sdk._worker.outcomes import cancelled_outcome
from conveyor_sdk.testing import PeerSession, ScriptedPeer
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker
from tests._frames import welcome

_welcome = partial(welcome, "S-latency", 30, 10)


def _dispatch(tid: str) -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.dispatch.task.CopyFrom(tpb.TaskEnvelope(id=tid, queue="default", type="t"))
    return msg


def _cancel(tid: str) -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.cancel.task_id = tid
    return msg


async def _result(sess: PeerSession) -> pb.Result:
    while True:
        msg = await sess.recv(10)
        assert msg is not None, "client half-closed unexpectedly"
        if msg.WhichOneof("frame") == "result":
            return msg.result


def _run(script: object, registry: Registry, executor: Executor | None = None) -> None:
    async def main() -> None:
        async with ScriptedPeer("grpc") as peer:
            worker = Worker(peer.url, close_timeout=0.5, executor=executor)
            run = asyncio.create_task(worker.run(registry))
            try:
                await script(peer, worker)  # type: ignore[operator]
            finally:
                worker.stop(immediate=True)
                await asyncio.wait_for(asyncio.gather(run, return_exceptions=True), 20)

    asyncio.run(main())


def test_idle_worker_takes_dispatches_in_the_read_turn() -> None:
    """An idle worker starts each Dispatch from the socket callback (counted), and answers it."""
    reg = Registry()

    @reg.handler("t")
    async def handler(task: TaskData, ctx: TaskContext) -> bytes:
        return b"ok"

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess = await peer.accept()
        assert (await sess.recv()) is not None  # Hello
        await sess.send_headers()
        await sess.send(_welcome())
        for i in range(5):
            await sess.send(_dispatch(f"T{i}"))
            res = await _result(sess)
            assert (res.task_id, res.outcome) == (f"T{i}", pb.TASK_OUTCOME_SUCCESS)
        stats = worker.statistics()
        assert stats["jobs_started"] == 5
        assert stats["frames_in_read_turn"] >= 5, stats

    _run(script, reg)


@pytest.mark.h2_fast
@pytest.mark.skipif(not (probe.fast or eager.PUBLIC_EAGER), reason="needs an eager task start")
def test_an_idle_workers_handler_starts_inside_the_socket_read_in_its_own_task() -> None:
    """The handler's first line runs within the read's callback (no loop turn in between), yet in
    the job's task: current_task(), asyncio.timeout() and context variables work as in any task."""
    reg = Registry()
    seen: list[tuple[str, bool, str, str]] = []
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    @reg.handler("t")
    async def handler(task: TaskData, ctx: TaskContext) -> bytes:
        in_read = any(f.function == "_on_data" for f in inspect.stack())
        current = asyncio.current_task()
        seen.append((task.id, in_read, current.get_name() if current else "", var.get()))
        var.set(task.id)  # must not leak into the next job
        async with asyncio.timeout(5):
            await asyncio.sleep(0)
        return b"ok"

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess = await _opened(peer)
        for tid in ("E1", "E2"):
            await sess.send(_dispatch(tid))
            res = await _result(sess)
            assert (res.task_id, res.outcome) == (tid, pb.TASK_OUTCOME_SUCCESS)
        assert seen == [
            ("E1", True, "conveyor-job-E1", "unset"),
            ("E2", True, "conveyor-job-E2", "unset"),
        ]

    _run(script, reg)


def test_dispatch_and_cancel_in_one_read_keep_their_order() -> None:
    """Dispatch then Cancel of the same task in one socket read: the started job is cancelled."""
    reg = Registry()
    started = asyncio.Event()

    @reg.handler("t")
    async def handler(task: TaskData, ctx: TaskContext) -> bytes:
        started.set()
        await ctx.until_cancelled()
        return b"should not be reported as success"

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess = await peer.accept()
        assert (await sess.recv()) is not None  # Hello
        await sess.send_headers()
        await sess.send(_welcome())
        burst = encode_frame(_dispatch("A").SerializeToString()) + encode_frame(
            _cancel("A").SerializeToString()
        )
        await sess.send_raw(burst, framed=True)
        res = await _result(sess)
        assert (res.task_id, res.outcome, res.error_msg) == ("A", pb.TASK_OUTCOME_RETRY, "canceled by server")

    _run(script, reg)


class HandOffExecutor:
    """A hand-off executor (``run`` is a plain method): records where and when it was called.

    Each job's future is resolved by the test (``finish``) or by ``cancel``, as a process
    pool would on JobDone or on a cancelled child.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, asyncio.Task[object] | None]] = []
        self.cancels: list[tuple[str, CancelReason]] = []
        self.futures: dict[str, asyncio.Future[list[Outcome]]] = {}
        self.called = asyncio.Event()

    async def start(self, wakeup: Callable[[], None]) -> None:
        pass

    def can_start(self, job: Job) -> bool:
        return True

    def run(self, job: Job, control: JobControl) -> asyncio.Future[list[Outcome]]:
        self.calls.append((job.job_id, asyncio.current_task()))
        fut = self.futures[job.job_id] = asyncio.get_running_loop().create_future()
        self.called.set()
        return fut

    def finish(self, job_id: str) -> None:
        self.futures[job_id].set_result([Outcome(OutcomeKind.SUCCESS, result=b"handed")])

    def cancel(self, job_id: str, reason: CancelReason) -> None:
        self.cancels.append((job_id, reason))
        fut = self.futures.get(job_id)
        if fut is not None and not fut.done():
            fut.set_result([cancelled_outcome()])

    async def close(self, grace: float) -> None:
        for fut in self.futures.values():
            if not fut.done():
                fut.set_result([Outcome(OutcomeKind.RELEASED, "closing")])


async def _opened(peer: ScriptedPeer) -> PeerSession:
    sess = await peer.accept()
    assert (await sess.recv()) is not None  # Hello
    await sess.send_headers()
    await sess.send(_welcome())
    return sess


def test_hand_off_executor_gets_the_job_in_the_read_turn() -> None:
    """A plain-method ``run`` is called from the socket callback (no task), before any task step."""
    executor = HandOffExecutor()

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess = await _opened(peer)
        await sess.send(_dispatch("H"))
        await asyncio.wait_for(executor.called.wait(), 10)
        assert executor.calls == [("H", None)]  # no current task: the read turn itself
        executor.finish("H")
        res = await _result(sess)
        assert (res.task_id, res.outcome, res.result) == ("H", pb.TASK_OUTCOME_SUCCESS, b"handed")
        # A Cancel after the hand-off goes to the executor (the job is no longer "unstarted").
        executor.called.clear()
        await sess.send(_dispatch("K"))
        await asyncio.wait_for(executor.called.wait(), 10)
        await sess.send(_cancel("K"))
        res = await _result(sess)
        assert (res.task_id, res.outcome, res.error_msg) == ("K", pb.TASK_OUTCOME_RETRY, "canceled by server")
        assert executor.cancels == [("K", CancelReason.SERVER_CANCEL)]

    _run(script, Registry(), executor)


def test_dispatch_and_cancel_in_one_read_never_reach_a_hand_off_executor() -> None:
    """The hand-off waits for the read's last frame: a Cancel read with its Dispatch wins."""
    executor = HandOffExecutor()

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess = await _opened(peer)
        burst = encode_frame(_dispatch("A").SerializeToString()) + encode_frame(
            _cancel("A").SerializeToString()
        )
        await sess.send_raw(burst, framed=True)
        res = await _result(sess)
        assert (res.task_id, res.outcome, res.error_msg) == ("A", pb.TASK_OUTCOME_RETRY, "canceled by server")
        assert executor.calls == [] and executor.cancels == []

    _run(script, Registry(), executor)


def test_a_failure_while_starting_a_job_in_the_read_turn_ends_the_session_not_the_callback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Fault injection (an internal bug cannot be made real): the first launch raises. The socket
    callback does not let it out (asyncio would log "Fatal error" and drop the transport); the
    worker ends the session with the error and reconnects."""
    from conveyor_sdk._worker import jobs

    original = jobs.Jobs._launch
    calls = [0]

    def failing_once(self: jobs.Jobs, run: jobs.Run, *, eager: bool) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("injected")
        original(self, run, eager=eager)

    monkeypatch.setattr(jobs.Jobs, "_launch", failing_once)
    reg = Registry()

    @reg.handler("t")
    async def handler(task: TaskData, ctx: TaskContext) -> bytes:
        return b"ok"

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess = await _opened(peer)
        await sess.send(_dispatch("F"))
        again = await asyncio.wait_for(_opened(peer), 10)  # the worker reconnected
        await again.send(_dispatch("G"))
        res = await _result(again)
        assert (res.task_id, res.outcome) == ("G", pb.TASK_OUTCOME_SUCCESS)

    with caplog.at_level(logging.WARNING):
        _run(script, reg)
    messages = [r.getMessage() for r in caplog.records]
    assert any("cannot start job F: RuntimeError('injected')" in m for m in messages), messages
    assert not any("Fatal error" in m for m in messages), messages


class GateExecutor:
    """Runs nothing until ``open``: ``can_start`` refuses, so the core parks every delivery."""

    def __init__(self) -> None:
        self.open = False
        self.seen: list[tuple[str, int, bytes]] = []

    async def start(self, wakeup: Callable[[], None]) -> None:
        pass

    def can_start(self, job: Job) -> bool:
        return self.open

    async def run(self, job: Job, control: JobControl) -> list[Outcome]:
        self.seen += [(t.id, t.retried, t.payload) for t in job.tasks]
        return [Outcome(OutcomeKind.SUCCESS) for _ in job.tasks]

    def cancel(self, job_id: str, reason: CancelReason) -> None:
        pass

    async def close(self, grace: float) -> None:
        pass


def test_a_redelivered_task_runs_with_its_new_fields_not_those_of_its_parked_delivery() -> None:
    """A delivery parked and answered unstarted, then dispatched again: the executor sees the new one.

    The Job built when the first delivery was parked must not stand in for the second
    (same task id, so same job id, but a new retry count and payload).
    """
    gate = GateExecutor()

    def dispatch(retried: int, payload: bytes) -> pb.ServerMessage:
        msg = _dispatch("A")
        msg.dispatch.task.retried = retried
        msg.dispatch.task.payload = payload
        return msg

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess = await peer.accept()
        assert (await sess.recv()) is not None  # Hello
        await sess.send_headers()
        await sess.send(_welcome())
        await sess.send(dispatch(0, b"first"))
        await sess.send(_cancel("A"))  # parked: answered at once, never started
        res = await _result(sess)
        assert (res.task_id, res.outcome, res.error_msg) == ("A", pb.TASK_OUTCOME_RETRY, "canceled by server")
        gate.open = True
        await sess.send(dispatch(1, b"second"))
        res = await _result(sess)
        assert (res.task_id, res.outcome) == ("A", pb.TASK_OUTCOME_SUCCESS)
        assert gate.seen == [("A", 1, b"second")]

    _run(script, Registry(), gate)


def test_a_hand_off_job_completes_through_its_future_not_a_task_of_its_own() -> None:
    """The executor's future is the job: no ``conveyor-job-*`` task is made for it, its result
    is reported, and a failed future is the task's RETRY ("executor failed: ...")."""
    executor = HandOffExecutor()

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess = await _opened(peer)
        await sess.send(_dispatch("F"))
        await asyncio.wait_for(executor.called.wait(), 10)
        assert [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("conveyor-job-")] == []
        executor.futures["F"].set_exception(RuntimeError("boom"))
        res = await _result(sess)
        assert (res.task_id, res.outcome) == ("F", pb.TASK_OUTCOME_RETRY)
        assert res.error_msg == "executor failed: RuntimeError('boom')"
        executor.called.clear()
        await sess.send(_dispatch("G"))
        await asyncio.wait_for(executor.called.wait(), 10)
        executor.finish("G")
        res = await _result(sess)
        assert (res.task_id, res.outcome, res.result) == ("G", pb.TASK_OUTCOME_SUCCESS, b"handed")

    _run(script, Registry(), executor)


def test_shutdown_releases_a_hand_off_job_whose_future_outlives_the_wait() -> None:
    """``Jobs.shutdown``: a hand-off future still pending after the wait is cancelled, and the job
    is reported RELEASED "worker stopped" (as when it was a task awaiting that future)."""

    class Stubborn(HandOffExecutor):
        def cancel(self, job_id: str, reason: CancelReason) -> None:
            self.cancels.append((job_id, reason))  # ignores it: the future stays pending

    class Host:
        concurrency = 1
        task_log = True
        logger = logging.getLogger("test.jobs")

        def encryption_for(self, registry: Registry) -> None:
            return None

    async def main() -> None:
        executor = Stubborn()
        posted: list[object] = []
        jobs = Jobs(
            executor, Registry(), Host(), machine=None,  # type: ignore[arg-type]  # not asked here
            control=JobControl(report_progress=lambda *a: None), post=posted.append,
        )  # fmt: skip
        task = TaskData(
            id="S", queue="q", type="t", payload=b"", content_type="", metadata={}, retried=0, max_retry=1
        )
        job = Job(job_id="S", queue="q", type="t", tasks=(task,), batch=False, deadline=None)
        run = Run(None, job, None)  # type: ignore[arg-type]  # the delivery is not read on this path
        jobs.running["S"] = run
        jobs._launch(run, eager=False)
        assert run.task is executor.futures["S"]
        await asyncio.wait_for(jobs.shutdown(wait=0.05), 10)
        assert executor.cancels == [("S", CancelReason.DRAIN)]
        assert posted == [JobDone("S", [Outcome(OutcomeKind.RELEASED, "worker stopped")])]

    asyncio.run(main())
