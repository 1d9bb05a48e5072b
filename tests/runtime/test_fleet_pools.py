"""Pools inside the process executor, with real children: spreading, lending, per-pool wakeups and drain."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from conveyor_sdk._runtime.executor import ExecutorOptions, ProcessExecutor
from conveyor_sdk._runtime.pools import PoolSpec
from conveyor_sdk._runtime.proc import ChildArgs
from conveyor_sdk._worker.executor import CancelReason, Job, JobControl, OutcomeKind, TaskData
from tests._util import eventually
from tests.runtime._executors import running

APP = """
import asyncio, os
from conveyor_sdk._worker.registry import Registry

app = Registry()

@app.handler("pid")
def pid(task, ctx):
    return b"%d" % os.getpid()

@app.handler("wait")
async def wait(task, ctx):
    await asyncio.sleep(60)
"""

CTL = JobControl(report_progress=lambda *a: None)


def _job(name: str, type_: str, queue: str) -> Job:
    task = TaskData(
        id=name, queue=queue, type=type_, payload=b"", content_type="application/octet-stream",
        metadata={}, retried=0, max_retry=3,
    )  # fmt: skip
    return Job(job_id=name, queue=queue, type=type_, tasks=(task,), batch=False, deadline=None)


@contextlib.asynccontextmanager
async def fleet(
    folder: Path, pools: Sequence[PoolSpec], capacity: int, weights: dict[str, int] | None = None
) -> AsyncIterator[ProcessExecutor]:
    """A started executor over ``pools``; always closed (children reaped) afterwards."""
    args = ChildArgs(app="poolapp:app", capacity=capacity, beat=0.2, cwd=str(folder))
    options = ExecutorOptions(kill_grace=0.5, weights=tuple((weights or {}).items()))
    ex = ProcessExecutor(args, pools, options)
    async with running(ex):
        yield ex


async def _true(value: bool) -> bool:
    return value


def test_sequential_work_spreads_over_both_children(write_app: Callable[[str, str], Path]) -> None:
    """One job at a time on 2 children x 2 slots: ties go round-robin, so each child runs half."""
    folder = write_app("poolapp", APP)

    async def main() -> None:
        async with fleet(folder, [PoolSpec("default", ("q",), 2)], capacity=2) as ex:
            pids: Counter[bytes] = Counter()
            for i in range(20):
                [out] = await ex.run(_job(f"t{i}", "pid", "q"), CTL)
                pids[out.result] += 1
            assert sorted(pids.values()) == [10, 10], pids  # before: one child ran all 20

    asyncio.run(main())


def test_concurrent_work_goes_to_the_least_loaded_child(write_app: Callable[[str, str], Path]) -> None:
    """With one child busy, new jobs go to the other until both carry the same load."""
    folder = write_app("poolapp", APP)

    async def main() -> None:
        async with fleet(folder, [PoolSpec("default", ("q",), 2)], capacity=3) as ex:
            runs = [asyncio.ensure_future(ex.run(_job(f"w{i}", "wait", "q"), CTL)) for i in range(4)]
            await eventually(lambda: _true(len(ex.running) == 4))
            assert sorted(len(c.jobs) for c in ex.children()) == [2, 2]
            for i in range(4):
                ex.cancel(f"w{i}", CancelReason.DRAIN)
            await asyncio.gather(*runs)

    asyncio.run(main())


def test_can_start_is_capacity_only_whatever_the_queue(write_app: Callable[[str, str], Path]) -> None:
    """a=3 b=1 on 4 slots: the executor lends all 4 to b and refuses only when no slot is free.

    Which queue gets a freed slot is the pool session's quota rule (conveyor_sdk._protocol.quota).
    """
    folder = write_app("poolapp", APP)

    async def main() -> None:
        pool = PoolSpec("shared", ("a", "b"), 1)
        async with fleet(folder, [pool], capacity=4, weights={"a": 3, "b": 1}) as ex:
            b_runs = []
            for i in range(4):
                job = _job(f"b{i}", "wait", "b")
                assert ex.can_start(job)
                b_runs.append(asyncio.ensure_future(ex.run(job, CTL)))
                await eventually(lambda i=i: _true(len(ex.running) == i + 1))  # type: ignore[misc]
            assert not ex.can_start(_job("a0", "wait", "a")) and not ex.can_start(_job("b9", "wait", "b"))
            ex.cancel("b0", CancelReason.SERVER_CANCEL)
            [out] = await b_runs[0]
            assert out.kind is OutcomeKind.RETRY
            assert ex.can_start(_job("a0", "wait", "a")) and ex.can_start(_job("b9", "wait", "b"))
            for job_id in ("b1", "b2", "b3"):
                ex.cancel(job_id, CancelReason.DRAIN)
            await asyncio.gather(*b_runs[1:])

    asyncio.run(main())


def test_each_pool_session_gets_its_own_wakeups_and_drain(write_app: Callable[[str, str], Path]) -> None:
    """Two pool views: a job ending in one pool wakes only its session; closing one leaves the other."""
    folder = write_app("poolapp", APP)

    async def main() -> None:
        pools = [PoolSpec("x", ("qx",), 1), PoolSpec("y", ("qy",), 1)]
        async with fleet(folder, pools, capacity=1) as ex:
            woken = {"x": asyncio.Event(), "y": asyncio.Event()}
            views = {name: ex.for_pool(name) for name in woken}
            for name, view in views.items():
                await view.start(woken[name].set)
            del ex._wakeups[None]  # the fixture's catch-all wakeup
            x_run = asyncio.ensure_future(views["x"].run(_job("x1", "wait", "qx"), CTL))
            y_run = asyncio.ensure_future(views["y"].run(_job("y1", "wait", "qy"), CTL))
            await eventually(lambda: _true(len(ex.running) == 2))
            woken["x"].clear()
            woken["y"].clear()
            await views["x"].close(0.0)  # x's session drained: its job is released, y's runs on
            [out] = await x_run
            assert out.cancelled  # cancelled with DRAIN: the core reports it RELEASED
            await asyncio.wait_for(woken["x"].wait(), 5)
            assert not woken["y"].is_set() and not y_run.done()
            assert not views["x"].can_start(_job("x2", "pid", "qx"))
            assert not views["y"].can_start(_job("y2", "pid", "qy"))  # its one slot is busy
            views["y"].cancel("y1", CancelReason.SERVER_CANCEL)
            await y_run
            await asyncio.wait_for(woken["y"].wait(), 5)
            assert views["y"].can_start(_job("y2", "pid", "qy"))

    asyncio.run(main())
