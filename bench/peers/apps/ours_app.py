"""Our handlers, as a user writes them: async for I/O-style work, a plain def for CPU work.

``app`` (no-op and latency) has only async handlers; ``cpu_app`` has one sync handler, so
``conveyor worker`` picks its sync default for it (see docs/runtime.md, "Defaults").
"""

from __future__ import annotations

from common import cpu, mark, started

from conveyor_sdk.worker import Registry, TaskContext, TaskData

app = Registry()
cpu_app = Registry()


@app.handler("noop")
async def noop(task: TaskData, ctx: TaskContext) -> None:
    mark("noop")


@app.handler("lat")
async def lat(task: TaskData, ctx: TaskContext) -> None:
    started(float(task.payload))


@cpu_app.handler("cpu")
def cpu_task(task: TaskData, ctx: TaskContext) -> None:
    cpu()
