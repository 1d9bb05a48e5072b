"""A child's JobDone settles its job at once; the session hears of the freed slot once per turn, first."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from conveyor_sdk._runtime import pipe
from conveyor_sdk._runtime.executor import ExecutorOptions, ProcessExecutor
from conveyor_sdk._runtime.pools import PoolSpec
from conveyor_sdk._runtime.proc import ChildArgs
from conveyor_sdk._worker.executor import Job, JobControl, OutcomeKind, TaskData

APP = """
import asyncio
from conveyor_sdk._worker.registry import Registry

app = Registry()

@app.handler("wait")
async def wait(task, ctx):
    await asyncio.sleep(60)
"""

CTL = JobControl(report_progress=lambda *a: None)


def _job(i: int) -> Job:
    task = TaskData(
        id=f"t{i}", queue="default", type="wait", payload=b"", content_type="", metadata={},
        retried=0, max_retry=3,
    )  # fmt: skip
    return Job(job_id=task.id, queue="default", type="wait", tasks=(task,), batch=False, deadline=None)


def test_jobdones_of_one_read_free_their_slots_and_wake_the_session_once_before_their_callbacks(
    write_app: Callable[[str, str], Path],
) -> None:
    """Three JobDones handled together: their slots are free at once, the wakeup comes once, in the
    next loop turn and ahead of every job's own done callback (the driver sees capacity, then results)."""
    folder = write_app("settleapp", APP)
    args = ChildArgs(app="settleapp:app", capacity=4, beat=0.2, cwd=str(folder))
    ex = ProcessExecutor(args, [PoolSpec("default", ("default",), 1)], ExecutorOptions(kill_grace=0.5))

    async def main() -> None:
        events: list[object] = []
        ex.spawn()
        try:
            await ex.start(lambda: events.append("wake"))
            events.clear()  # the child's Ready woke it
            futures = [ex.run(_job(i), CTL) for i in range(3)]
            for i, future in enumerate(futures):
                future.add_done_callback(lambda _, i=i: events.append((f"done t{i}", len(ex.running))))  # type: ignore[misc]
            [child] = ex.children()
            assert child.free == 1 and events == []
            for i in range(3):  # as one pipe read holding three frames delivers them
                done = pipe.JobDone(f"t{i}", [pipe.OutcomeMsg(int(OutcomeKind.SUCCESS))], 0.001)
                ex._on_message(child, done)
            assert child.free == 4 and not ex.running and events == []
            results = await asyncio.gather(*futures)
            assert [out.kind for [out] in results] == [OutcomeKind.SUCCESS] * 3
            assert events == ["wake", ("done t0", 0), ("done t1", 0), ("done t2", 0)]
        finally:
            ex.abort("test over")
            await ex.close(0)

    asyncio.run(main())
