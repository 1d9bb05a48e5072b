"""ProcessExecutor with real child processes: results, crashes, hard kills, recycling, reload, drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from conveyor_sdk._runtime.executor import ExecutorOptions, ProcessExecutor, RuntimeFailure
from conveyor_sdk._runtime.pools import PoolSpec
from conveyor_sdk._runtime.proc import ChildArgs, ChildState
from conveyor_sdk._worker.executor import CancelReason, Job, JobControl, OutcomeKind, TaskData
from tests._util import eventually

APP = """
import asyncio, os, time
from conveyor_sdk._worker.registry import Registry

app = Registry()
VERSION = "v1"

@app.handler("echo")
async def echo(task, ctx):
    ctx.report_progress(40, "working")
    return task.payload

@app.handler("pid")
def pid(task, ctx):
    return b"%d %s" % (os.getpid(), VERSION.encode())

@app.handler("wait")
async def wait(task, ctx):
    await asyncio.sleep(60)

@app.handler("exit")
def exit_(task, ctx):
    os._exit(13)

@app.handler("stubborn")
def stubborn(task, ctx):
    time.sleep(60)

@app.batch_handler("sum")
def total(tasks, ctx):
    for t in tasks:
        ctx.report_progress(100, "member", task_id=t.id)
    return [t.payload if t.payload != b"bad" else ValueError("bad member") for t in tasks]

@app.handler("block-loop")
async def block_loop(task, ctx):
    time.sleep(60)
"""


def _job(i: int | str, type_: str = "echo", deadline: float | None = None, queue: str = "default") -> Job:
    task = TaskData(
        id=f"t{i}", queue=queue, type=type_, payload=f"p{i}".encode(),
        content_type="application/octet-stream", metadata={}, retried=0, max_retry=3,
    )  # fmt: skip
    return Job(job_id=task.id, queue=queue, type=type_, tasks=(task,), batch=False, deadline=deadline)


def _executor(folder: Path, processes: int = 1, capacity: int = 2, **opts: object) -> ProcessExecutor:
    args = ChildArgs(app="rtapp:app", capacity=capacity, beat=0.2, cwd=str(folder))
    options = ExecutorOptions(**{"kill_grace": 0.5, **opts})  # type: ignore[arg-type]
    return ProcessExecutor(args, [PoolSpec("default", ("default",), processes)], options)


@contextlib.asynccontextmanager
async def started(folder: Path, **kwargs: object) -> AsyncIterator[ProcessExecutor]:
    """A spawned and started executor that is always closed (children reaped) afterwards."""
    wakeup = kwargs.pop("wakeup", lambda: None)
    ex = _executor(folder, **kwargs)  # type: ignore[arg-type]
    ex.spawn()
    try:
        await ex.start(wakeup)  # type: ignore[arg-type]
        yield ex
    finally:
        ex.abort("test over")
        await ex.close(0)


def _ctl(progress: list[tuple[str, int, str]] | None = None) -> JobControl:
    return JobControl(report_progress=lambda *a: progress.append(a) if progress is not None else None)


def _run(main: Callable[[], object]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


def test_runs_async_and_sync_handlers_and_forwards_progress(write_app: Callable[[str, str], Path]) -> None:
    """Async and sync handlers return SUCCESS with their bytes; progress reaches the control."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        async with started(folder) as ex:
            progress: list[tuple[str, int, str]] = []
            [out] = await ex.run(_job(1), _ctl(progress))
            assert (out.kind, out.result) == (OutcomeKind.SUCCESS, b"p1")
            [out] = await ex.run(_job(2, "pid"), _ctl())
            assert out.kind is OutcomeKind.SUCCESS
            assert int(out.result.split()[0]) == ex.children()[0].pid != os.getpid()
            assert progress == [("t1", 40, "working")]

    _run(main)


def test_can_start_respects_capacity(write_app: Callable[[str, str], Path]) -> None:
    """With one child of capacity 2, a third concurrent job is refused until a slot frees."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        woken = asyncio.Event()
        async with started(folder, capacity=2, wakeup=woken.set) as ex:
            runs = [asyncio.ensure_future(ex.run(_job(i, "wait"), _ctl())) for i in range(2)]
            await eventually(lambda: _true(len(ex.running) == 2))
            assert not ex.can_start(_job(3))
            woken.clear()
            ex.cancel("t0", CancelReason.SERVER_CANCEL)
            [out] = await runs[0]
            assert out.cancelled and out.kind is OutcomeKind.RETRY
            await asyncio.wait_for(woken.wait(), 5)
            assert ex.can_start(_job(3))
            ex.cancel("t1", CancelReason.DRAIN)
            await runs[1]

    _run(main)


def test_a_cancel_sent_right_behind_its_job_reaches_the_child(write_app: Callable[[str, str], Path]) -> None:
    """RunJob and CancelJob in one loop turn (the child reads them together, before the job's first
    step): the child cancels the handler and keeps serving. Before, the cancel found no job yet and
    was dropped, so the handler ran on until kill_grace and its child was killed."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        async with started(folder, kill_grace=30) as ex:
            pid = ex.children()[0].pid
            for i in range(5):
                job = _job(f"c{i}", "wait")
                run = asyncio.ensure_future(ex.run(job, _ctl()))
                await asyncio.sleep(0)  # ex.run's hand-off ran: the RunJob is written
                ex.cancel(job.job_id, CancelReason.SERVER_CANCEL)
                [out] = await asyncio.wait_for(run, 10)
                assert out.cancelled and out.kind is OutcomeKind.RETRY
            assert [c.pid for c in ex.children()] == [pid]  # never killed nor replaced

    _run(main)


async def _true(value: bool) -> bool:
    return value


def test_sigkill_of_a_child_mid_task_gives_retry_and_a_replacement(
    write_app: Callable[[str, str], Path],
) -> None:
    """kill -9 of the child running a task: the task gets RETRY 'worker process died: SIGKILL'."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        async with started(folder) as ex:
            victim = ex.children()[0].pid
            run = asyncio.ensure_future(ex.run(_job(1, "wait"), _ctl()))
            await eventually(lambda: _true(bool(ex.running)))
            os.kill(victim, signal.SIGKILL)
            [out] = await asyncio.wait_for(run, 10)
            assert out.kind is OutcomeKind.RETRY
            assert out.error_msg == "worker process died: SIGKILL"
            await eventually(lambda: _true(any(c.state is ChildState.READY for c in ex.children())), 15)
            assert ex.children()[0].pid != victim
            [out] = await ex.run(_job(2), _ctl())
            assert out.kind is OutcomeKind.SUCCESS
            assert ex.restarts == 1

    _run(main)


def test_handler_calling_os_exit_fails_only_its_task(write_app: Callable[[str, str], Path]) -> None:
    """os._exit in a handler -> RETRY with the exit code; the other child keeps working."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        async with started(folder, processes=2, capacity=1) as ex:
            slow = asyncio.ensure_future(ex.run(_job("slow", "wait"), _ctl()))
            await eventually(lambda: _true(bool(ex.running)))
            [out] = await ex.run(_job(1, "exit"), _ctl())
            assert (out.kind, out.error_msg) == (OutcomeKind.RETRY, "worker process died: exit code 13")
            assert not slow.done()
            ex.cancel("tslow", CancelReason.DRAIN)
            [out] = await slow
            assert out.cancelled

    _run(main)


def test_blocked_child_loop_is_logged_and_killed_past_the_deadline(
    write_app: Callable[[str, str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    """An async handler blocking its loop stops the beats: logged with the task, killed after its deadline."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        async with started(folder, hung_after=0.6) as ex:
            deadline = time.time() + 1.5
            [out] = await asyncio.wait_for(ex.run(_job(1, "block-loop", deadline=deadline), _ctl()), 20)
            assert time.time() >= deadline
            assert (out.kind, out.cancelled) == (OutcomeKind.RETRY, True)
            assert any("unresponsive" in r.getMessage() and "t1" in r.getMessage() for r in caplog.records)

    _run(main)


def test_child_import_failure_stops_start(write_app: Callable[[str, str], Path]) -> None:
    """A child that cannot import the app makes start() raise RuntimeFailure naming the error."""
    folder = write_app("rtapp", "raise RuntimeError('boom at import')\n")

    async def main() -> None:
        ex = _executor(folder, processes=2)
        ex.spawn()
        with pytest.raises(RuntimeFailure, match="boom at import"):
            await ex.start(lambda: None)
        await ex.close(0)

    _run(main)


def test_max_tasks_recycles_children_without_losing_jobs(
    write_app: Callable[[str, str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    """With max_tasks_per_child=5, jobs keep succeeding while successive child pids serve them."""
    folder = write_app("rtapp", APP)
    caplog.set_level(logging.INFO, logger="conveyor.runtime")

    async def main() -> None:
        async with started(folder, capacity=1, max_tasks_per_child=5) as ex:
            pids: list[int] = []
            deadline = time.monotonic() + 30
            i = 0
            while len(set(pids)) < 3 and time.monotonic() < deadline:
                i += 1
                await eventually(lambda i=i: _true(ex.can_start(_job(i, "pid"))))
                [out] = await ex.run(_job(i, "pid"), _ctl())
                assert out.kind is OutcomeKind.SUCCESS
                pids.append(int(out.result.split()[0]))
            assert len(set(pids)) >= 3, pids
            assert ex.restarts == 0  # recycling is not a crash
        # Recycling begins at the cap: the first child's exactly, a later one's no sooner (it waits
        # while a replacement is still starting; the old child serves on until it is ready).
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("recycling child")]
        done = [int(line.rsplit(" after ", 1)[1].split()[0]) for line in lines]
        assert len(done) >= 2 and done[0] == 5 and min(done) >= 5, lines

    _run(main)


def test_reload_serves_new_code_and_old_children_finish(write_app: Callable[[str, str], Path]) -> None:
    """After reload(), new jobs run the changed module; a job running in an old child completes."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        async with started(folder) as ex:
            old = asyncio.ensure_future(ex.run(_job("old", "wait"), _ctl()))
            await eventually(lambda: _true(bool(ex.running)))
            write_app("rtapp", APP.replace('VERSION = "v1"', 'VERSION = "v2"'))
            assert await ex.reload()
            [out] = await ex.run(_job(1, "pid"), _ctl())
            assert out.result.endswith(b"v2")
            assert not old.done()
            ex.cancel("told", CancelReason.SERVER_CANCEL)
            [out] = await old
            assert out.cancelled

    _run(main)


def test_close_releases_jobs_that_ignore_the_drain(write_app: Callable[[str, str], Path]) -> None:
    """close(grace) waits, then stops a stubborn job: RELEASED, cancelled, no child left."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        async with started(folder) as ex:
            run = asyncio.ensure_future(ex.run(_job(1, "stubborn"), _ctl()))
            await eventually(lambda: _true(bool(ex.running)))
            await ex.close(0.2)
            [out] = await run
            assert (out.kind, out.cancelled) == (OutcomeKind.RELEASED, True)
            assert all(c.popen is None or c.popen.poll() is not None for c in ex.children())

    _run(main)


def test_memory_limit_recycles_a_child(write_app: Callable[[str, str], Path]) -> None:
    """A child above max_memory_mb is replaced (replacement first) without failing any job."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        async with started(folder, capacity=1, max_memory_mb=1) as ex:
            first = ex.children()[0].pid
            await eventually(
                lambda: _true(any(c.pid != first for c in ex.children() if c.state is ChildState.READY)), 15
            )
            [out] = await ex.run(_job(1, "pid"), _ctl())
            assert out.kind is OutcomeKind.SUCCESS
            assert ex.restarts == 0

    _run(main)


def test_explicit_pools_isolate_queues(write_app: Callable[[str, str], Path]) -> None:
    """Jobs of a queue in an explicit pool run only in that pool's children."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        args = ChildArgs(app="rtapp:app", capacity=1, beat=0.2, cwd=str(folder))
        pools = [PoolSpec("slow", ("slow",), 1), PoolSpec("default", ("default",), 1)]
        ex = ProcessExecutor(args, pools, ExecutorOptions(kill_grace=0.5))
        ex.spawn()
        try:
            await ex.start(lambda: None)
            by_pool = {c.pool: c.pid for c in ex.children()}
            blocker = asyncio.ensure_future(ex.run(_job("b", "wait", queue="slow"), _ctl()))
            await eventually(lambda: _true(bool(ex.running)))
            assert not ex.can_start(_job("s2", "pid", queue="slow"))  # slow pool full
            assert ex.can_start(_job("d1", "pid"))  # default pool unaffected
            [out] = await ex.run(_job("d1", "pid"), _ctl())
            assert int(out.result.split()[0]) == by_pool["default"]
            ex.cancel("tb", CancelReason.DRAIN)
            await blocker
        finally:
            ex.abort("test over")
            await ex.close(0)

    _run(main)


def test_concurrent_reloads_collapse_into_one_more(write_app: Callable[[str, str], Path]) -> None:
    """Two reloads at once: both succeed, one fresh generation per pool slot ends up serving."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        async with started(folder, processes=2) as ex:
            assert all(await asyncio.gather(ex.reload(), ex.reload()))
            await eventually(lambda: _true(len(ex.children()) == 2), 15)
            assert all(c.state is ChildState.READY for c in ex.children())
            [out] = await ex.run(_job(1, "pid"), _ctl())
            assert out.kind is OutcomeKind.SUCCESS

    _run(main)


def test_batch_jobs_map_one_outcome_per_member(write_app: Callable[[str, str], Path]) -> None:
    """A batch crosses the pipe whole: one outcome per member, in order; member progress is forwarded."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        tasks = tuple(
            TaskData(id=f"m{i}", queue="default", type="sum", payload=p, content_type="", metadata={},
                     retried=0, max_retry=3, group="g")
            for i, p in enumerate([b"a", b"bad", b"c"])
        )  # fmt: skip
        job = Job(job_id="batch:m0", queue="default", type="sum", tasks=tasks, batch=True, deadline=None)
        progress: list[tuple[str, int, str]] = []
        async with started(folder) as ex:
            outs = await ex.run(job, _ctl(progress))
        assert [o.kind for o in outs] == [OutcomeKind.SUCCESS, OutcomeKind.RETRY, OutcomeKind.SUCCESS]
        assert (outs[0].result, outs[2].result) == (b"a", b"c")
        assert "bad member" in outs[1].error_msg
        assert [p[0] for p in progress] == ["m0", "m1", "m2"]

    _run(main)


def test_cancel_reaches_a_job_waiting_for_a_slot(write_app: Callable[[str, str], Path]) -> None:
    """``run`` with no free slot (a lost race after ``can_start``): the job waits, registered, so a
    Cancel while it waits ends it cancelled and the child never runs it; a job that was not
    cancelled runs once the slot frees."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        async with started(folder, capacity=1) as ex:
            blocker = asyncio.ensure_future(ex.run(_job("b", "wait"), _ctl()))
            await eventually(lambda: _true(bool(ex.running)))
            cancelled = asyncio.ensure_future(ex.run(_job("c", "pid"), _ctl()))
            patient = asyncio.ensure_future(ex.run(_job("p", "pid"), _ctl()))
            assert set(ex.waiting) == {"tc", "tp"}
            ex.cancel("tc", CancelReason.SERVER_CANCEL)
            [out] = await asyncio.wait_for(cancelled, 10)
            assert (out.kind, out.error_msg, out.cancelled) == (OutcomeKind.RETRY, "canceled by server", True)
            assert "tc" not in ex.running and not patient.done()
            ex.cancel("tb", CancelReason.DRAIN)  # frees the slot
            [out] = await asyncio.wait_for(blocker, 10)
            assert out.cancelled
            [out] = await asyncio.wait_for(patient, 10)
            assert out.kind is OutcomeKind.SUCCESS
            assert ex.waiting == {}

    _run(main)
