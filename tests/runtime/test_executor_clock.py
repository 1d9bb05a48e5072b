"""The process executor's timing decisions on a ManualClock: each happens at its instant, not a moment before.

The children are real processes; only the executor's clock is virtual (``_transport/clock.py``), so a
kill after ``kill_grace`` and a hung child's kill past its job's deadline are checked at their exact
instants without waiting them out. On the real clock: the kill after the grace in
``test_worker_e2e.py`` (the whole worker), the hung child in ``test_executor.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from conveyor_sdk._runtime.executor import ExecutorOptions, ProcessExecutor, RuntimeFailure
from conveyor_sdk._runtime.pools import PoolSpec
from conveyor_sdk._runtime.proc import ChildArgs, ChildState
from conveyor_sdk._transport.clock import ManualClock
from conveyor_sdk._worker.executor import CancelReason, Job, JobControl, OutcomeKind, TaskData
from tests._util import until
from tests.runtime._executors import running
from tests.runtime.test_executor import APP

GRACE = 0.5


def _job(type_: str, deadline: float | None = None, job_id: str = "t1") -> Job:
    task = TaskData(
        id=job_id, queue="default", type=type_, payload=b"", content_type="application/octet-stream",
        metadata={}, retried=0, max_retry=3,
    )  # fmt: skip
    return Job(job_id=job_id, queue="default", type=type_, tasks=(task,), batch=False, deadline=deadline)


@contextlib.asynccontextmanager
async def started(folder: Path, clock: ManualClock, **opts: object) -> AsyncIterator[ProcessExecutor]:
    """One child (beats every 0.2 s) on ``clock``; always closed (children reaped) afterwards."""
    args = ChildArgs(app="rtapp:app", capacity=2, beat=0.2, cwd=str(folder))
    options = ExecutorOptions(**{"kill_grace": GRACE, **opts})  # type: ignore[arg-type]
    ex = ProcessExecutor(args, [PoolSpec("default", ("default",), 1)], options, clock=clock)
    async with running(ex):
        yield ex


def test_a_job_ignoring_its_cancel_is_killed_exactly_after_the_grace(
    write_app: Callable[[str, str], Path],
) -> None:
    """Cancelled at t: at t + grace - 10 ms the job still runs; at t + grace the child is killed
    (a cancelled RETRY) and a replacement takes over."""
    folder = write_app("rtapp", APP)

    async def main() -> None:
        clock = ManualClock()
        async with started(folder, clock) as ex:
            child = ex.children()[0]
            run = asyncio.ensure_future(ex.run(_job("stubborn"), JobControl(report_progress=lambda *a: None)))
            await until(lambda: "t1" in ex.running, timeout=10)
            ex.cancel("t1", CancelReason.DEADLINE)
            await clock.advance(GRACE - 0.01)
            assert not child.kill_note and not run.done()  # a kill is decided (and noted) at once
            await clock.advance(0.01)
            [out] = await asyncio.wait_for(run, 10)
            assert (out.kind, out.error_msg, out.cancelled) == (OutcomeKind.RETRY, "deadline exceeded", True)
            assert "ignored cancellation" in child.kill_note
            await until(lambda: any(c.state is ChildState.READY for c in ex.children()), timeout=15)
            assert ex.children()[0].pid != child.pid  # a replacement serves on
            assert not ex.running

    asyncio.run(main())


def test_a_hung_child_is_logged_then_killed_once_the_deadline_and_grace_have_passed(
    write_app: Callable[[str, str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    """Beats stop (a blocked loop): logged after hung_after; killed only past deadline + grace."""
    folder = write_app("rtapp", APP)
    caplog.set_level(logging.WARNING, "conveyor.runtime")

    async def main() -> None:
        clock = ManualClock()
        async with started(folder, clock, hung_after=0.6) as ex:
            child = ex.children()[0]
            deadline = clock.time() + 1.5
            run = asyncio.ensure_future(
                ex.run(_job("block-loop", deadline), JobControl(report_progress=lambda *a: None))
            )
            await until(lambda: "t1" in ex.running, timeout=10)
            # A beat the child sent just before blocking may still be in the pipe; it must land
            # before virtual time moves (it would stamp a later instant). Its absence has no event.
            await asyncio.sleep(0.3)
            await clock.advance(0.4)
            assert not any("unresponsive" in r.getMessage() for r in caplog.records)
            await clock.advance(0.4)  # 0.8 s silent > hung_after
            assert any("unresponsive" in r.getMessage() and "t1" in r.getMessage() for r in caplog.records)
            await clock.advance(1.5 + GRACE - 0.8 - 0.05)  # just short of deadline + grace
            assert not child.kill_note and not run.done()
            await clock.advance(0.3)
            [out] = await asyncio.wait_for(run, 10)
            assert (out.kind, out.cancelled) == (OutcomeKind.RETRY, True)
            assert "hung past the deadline" in child.kill_note

    asyncio.run(main())


def test_a_second_crash_within_10_s_is_respawned_only_after_the_backoff(
    write_app: Callable[[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first crash is replaced at once; the second, 10 s later on the clock, also (the window
    forgot the first); a third 1 s after it waits respawn_base x jitter (0.15 s here) first."""
    folder = write_app("rtapp", APP)
    monkeypatch.setattr("conveyor_sdk._runtime.fleet.random.uniform", lambda a, b: 0.75)  # fixed jitter

    async def main() -> None:
        clock = ManualClock()
        async with started(folder, clock, respawn_base=0.2) as ex:

            async def crash(i: int) -> None:
                [out] = await ex.run(
                    _job("exit", job_id=f"crash{i}"), JobControl(report_progress=lambda *a: None)
                )
                assert out.kind is OutcomeKind.RETRY

            async def replaced(count: int) -> None:
                await until(
                    lambda: len(ex.children()) == 1 and ex.children()[0].state is ChildState.READY, 15
                )
                assert ex.restarts == count

            await crash(1)
            await replaced(1)  # no backoff for a first crash: the clock never moved
            await clock.advance(10.0)
            await crash(2)
            await replaced(2)
            await clock.advance(1.0)
            await crash(3)
            await until(lambda: ex.restarts == 3 and not ex.children(), 15)
            await clock.advance(0.149)
            assert not ex.children()  # still backing off
            await clock.advance(0.002)  # 0.151 s: past it (float sums blur the exact instant)
            await replaced(3)

    asyncio.run(main())


class _ReadCountingClock(ManualClock):
    """Counts ``monotonic()`` reads, so a test can wait for a polling loop to look at the time again."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def monotonic(self) -> float:
        self.reads += 1
        return super().monotonic()


def test_children_not_ready_by_start_timeout_fail_the_start_at_that_instant(
    write_app: Callable[[str, str], Path],
) -> None:
    """A child stuck importing the app: start() still waits at 59.9 s and fails at 60 s, naming the bound."""
    folder = write_app("rtapp", "import time\ntime.sleep(60)\n")

    async def main() -> None:
        clock = _ReadCountingClock()
        args = ChildArgs(app="rtapp:app", capacity=1, beat=0.2, cwd=str(folder))
        ex = ProcessExecutor(args, [PoolSpec("default", ("default",), 1)], ExecutorOptions(), clock=clock)
        ex.spawn()
        starting = asyncio.ensure_future(ex.start(lambda: None))
        try:
            # Its pipes attached, the start-up loop has taken its deadline (same step): from now on.
            await until(lambda: ex.children()[0]._reader is not None, timeout=10)
            await clock.advance(59.9)
            seen = clock.reads  # the start-up loop reads the clock once per poll: let it poll 3 more times
            await until(lambda: clock.reads >= seen + 3, timeout=10, what="three polls at 59.9 s")
            assert not starting.done()
            await clock.advance(0.1)
            with pytest.raises(RuntimeFailure, match="children not ready after 60s"):
                await asyncio.wait_for(starting, 10)
        finally:
            ex.abort("test over")
            await ex.close(0)

    asyncio.run(main())
