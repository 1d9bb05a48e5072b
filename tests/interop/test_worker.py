"""The in-process Worker against conveyord: outcomes, metadata, progress, cancel, drain, batches, restart."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from conveyor_sdk.client import Client
from conveyor_sdk.types import RetryPolicy, TaskState
from conveyor_sdk.worker import CancelReason, Registry, SkipRetry, TaskContext, TaskData, Worker
from tests._util import eventually
from tests.interop._conveyord import Conveyord
from tests.sdk_worker._helpers import KEEP, running, wait_state

FAST = RetryPolicy(base=0.05, max=0.1)


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_every_outcome(cv_url: str, protocol: str) -> None:
    """SUCCESS completes, SkipRetry archives at once, an exception retries until archived."""
    reg = Registry()
    seen: dict[str, str] = {}

    @reg.handler("iok")
    def ok(task: TaskData, ctx: TaskContext) -> bytes:
        seen.update(ctx.metadata)
        return b"result"

    @reg.handler("iskip")
    def skip(task: TaskData, ctx: TaskContext) -> None:
        raise SkipRetry("bad input")

    @reg.handler("iboom")
    async def boom(task: TaskData, ctx: TaskContext) -> None:
        raise ValueError("nope")

    async def main() -> None:
        q = f"q-out-{protocol}"
        worker = Worker(cv_url, protocol=protocol, queues=[q])
        async with Client(cv_url) as client, running(worker, reg):
            ok_ = await client.enqueue("iok", b"", queue=q, metadata={"tenant": "acme"}, **KEEP)
            sk = await client.enqueue("iskip", b"", queue=q, **KEEP)
            bm = await client.enqueue("iboom", b"", queue=q, max_retry=1, retry_policy=FAST, **KEEP)
            await wait_state(client, ok_.id, TaskState.COMPLETED)
            info = await wait_state(client, sk.id, TaskState.ARCHIVED)
            assert info.last_error == "bad input" and info.retried == 0
            info = await wait_state(client, bm.id, TaskState.ARCHIVED)
            assert "ValueError: nope" in info.last_error and info.retried == 1
        assert seen.get("tenant") == "acme"

    asyncio.run(main())


def test_progress_and_cancel(cv_url: str) -> None:
    """Progress is visible via GetTask; an admin cancel reaches the handler as SERVER_CANCEL."""
    reg = Registry()
    started = threading.Event()
    reasons: list[CancelReason | None] = []

    @reg.handler("iprog")
    def prog(task: TaskData, ctx: TaskContext) -> None:
        ctx.report_progress(60, "at 60")
        started.set()
        ctx.wait_cancelled(30)
        reasons.append(ctx.cancel_reason)
        ctx.raise_if_cancelled()

    async def main() -> None:
        worker = Worker(cv_url, queues=["q-prog"], progress_interval=0.1)
        async with Client(cv_url) as client, running(worker, reg):
            info = await client.enqueue("iprog", b"", queue="q-prog", **KEEP)

            async def progressed() -> bool:
                t = await client.get_task(info.id)
                return t.progress == 60 and t.progress_message == "at 60"

            await eventually(progressed, timeout=20, interval=0.05)
            await client.admin.cancel_task(info.id)
            await wait_state(client, info.id, TaskState.ARCHIVED)
        assert reasons == [CancelReason.SERVER_CANCEL]

    asyncio.run(main())


def test_drain_finishes_in_flight(cv_url: str) -> None:
    """stop() while a task runs: it finishes within grace, completes, and run() returns."""
    reg = Registry()
    started = asyncio.Event()

    @reg.handler("idrain")
    async def job(task: TaskData, ctx: TaskContext) -> bytes:
        started.set()
        await asyncio.sleep(0.5)
        return b"finished"

    async def main() -> None:
        worker = Worker(cv_url, queues=["q-drain"], grace=20)
        async with Client(cv_url) as client:
            async with running(worker, reg) as run:
                info = await client.enqueue("idrain", b"", queue="q-drain", **KEEP)
                await asyncio.wait_for(started.wait(), 20)
                worker.stop()
                await asyncio.wait_for(run, 20)
            done = await wait_state(client, info.id, TaskState.COMPLETED)
            assert done.retried == 0

    asyncio.run(main())


def test_batch_handler_gets_the_group(node_factory: Callable[..., Conveyord]) -> None:
    """Three tasks of one group reach one batch handler call together once the group fires."""
    node = node_factory(
        extra="  group_max_size: 3\n  group_grace_period: 500ms\n  group_sweep_interval: 300ms\n"
    )
    reg = Registry()
    batches: list[int] = []

    @reg.batch_handler("iagg")
    def agg(tasks: list[TaskData], ctx: TaskContext) -> None:
        batches.append(len(tasks))

    async def main() -> None:
        async with Client(node.url) as client, running(Worker(node.url, queues=["q-agg"]), reg):
            ids = [
                (await client.enqueue("iagg", b"", queue="q-agg", group="g1", **KEEP)).id for _ in range(3)
            ]
            for tid in ids:
                await wait_state(client, tid, TaskState.COMPLETED)
        assert batches == [3]

    asyncio.run(main())


def test_reconnects_after_server_restart(node_factory: Callable[..., Conveyord]) -> None:
    """The worker's session survives conveyord stopping and starting again on the same port."""
    node = node_factory()
    reg = Registry()
    reg.handler("irestart")(lambda t, c: b"")

    async def main() -> None:
        worker = Worker(node.url, queues=["q-restart"], reconnect_max=1.0)
        async with running(worker, reg):
            async with Client(node.url) as client:
                first = await client.enqueue("irestart", b"", queue="q-restart", **KEEP)
                await wait_state(client, first.id, TaskState.COMPLETED)
            await asyncio.to_thread(node.stop)
            await asyncio.to_thread(node.start)
            async with Client(node.url) as client:
                second = await client.enqueue("irestart", b"", queue="q-restart", **KEEP)
                await wait_state(client, second.id, TaskState.COMPLETED, timeout=30)

    asyncio.run(main())
