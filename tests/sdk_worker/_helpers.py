"""Shared helpers for worker tests: run a Worker in the background and poll task states."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from conveyor_sdk.client import Client
from conveyor_sdk.types import TaskInfo, TaskState
from conveyor_sdk.worker import Registry, Worker
from tests._util import eventually

KEEP = {"retention": 3600, "content_type": "application/octet-stream"}


@contextlib.asynccontextmanager
async def running(
    worker: Worker, registry: Registry, stop_timeout: float = 40.0
) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``worker`` while the block runs; then drain it and require a clean return."""
    task = asyncio.create_task(worker.run(registry))
    try:
        yield task
    finally:
        if not task.done():
            worker.stop()
        await asyncio.wait_for(task, stop_timeout)


async def wait_state(
    client: Client,
    task_id: str,
    state: TaskState,
    timeout: float = 30.0,
    check: Callable[[TaskInfo], bool] = lambda info: True,
) -> TaskInfo:
    """Poll GetTask until the task is in ``state`` (and ``check`` holds)."""

    async def probe() -> TaskInfo | None:
        info = await client.get_task(task_id)
        return info if info.state == state and check(info) else None

    result = await eventually(probe, timeout=timeout, interval=0.05, what=f"{task_id} -> {state.name}")
    assert result is not None
    return result


async def callbacks_queued_so_far() -> None:
    """Return once every callback the loop had queued before this call has run (a task's next
    step, a ``call_soon_threadsafe`` callback): a condition, not a pause of some length."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon_threadsafe(done.set_result, None)  # queued behind them
    await done
