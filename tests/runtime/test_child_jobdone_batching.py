"""A child answers the RunJobs of one pipe read with one write of JobDones at the turn's end."""

from __future__ import annotations

import asyncio
import os

from conveyor_sdk._runtime import pipe
from conveyor_sdk._runtime.child import ChildLoop, _Reader
from conveyor_sdk._worker.registry import Registry
from conveyor_sdk.worker import TaskContext, TaskData


def _readable(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return b""


def _run_job(job_id: str) -> bytes:
    task = pipe.TaskMsg(job_id, "q", "noop", b"", "application/octet-stream", {}, 0, 3)
    return pipe.encode(pipe.RunJob(job_id, "q", "noop", [task], False, None))


async def _scenario() -> None:
    reg = Registry()
    started: list[str] = []

    @reg.handler("noop")
    async def noop(task: TaskData, ctx: TaskContext) -> None:
        started.append(task.id)

    loop = asyncio.get_running_loop()
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    child = ChildLoop(reg, -1, -1, capacity=4, beat=60.0)
    child.writer, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(wfd, "wb", 0))
    reader = _Reader(child)
    read_turn_done = loop.create_future()
    seen: list[bytes] = []

    def pipe_read() -> None:  # what the child's pipe read does: a loop callback, outside any task
        reader.data_received(b"".join(_run_job(f"j{i}") for i in range(3)))
        seen.append(_readable(rfd))  # still in the read's turn
        read_turn_done.set_result(None)

    try:
        loop.call_soon(pipe_read)
        await read_turn_done
        assert started == ["j0", "j1", "j2"]  # each handler started in the read's own turn
        assert seen == [b""]  # ... but no JobDone left yet, not even the first one
        for _ in range(3):
            await asyncio.sleep(0)
        frames = pipe.FrameReader().feed(_readable(rfd))
        assert [m.job_id for m in frames if isinstance(m, pipe.JobDone)] == ["j0", "j1", "j2"]
        assert _readable(rfd) == b""
    finally:
        child.writer.close()
        os.close(rfd)


def test_jobdones_of_one_read_leave_together() -> None:
    """Three no-op jobs read at once: their handlers start at once, their JobDones leave together."""
    asyncio.run(_scenario())
