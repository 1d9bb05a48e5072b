"""One typed declaration on both sides: producer enqueues, a real Worker decodes and runs it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import msgspec
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from conveyor_sdk.app import App
from conveyor_sdk.client import Client, SyncClient
from conveyor_sdk.types import TaskState
from conveyor_sdk.worker import TaskContext, Worker
from tests._util import eventually

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C


class Welcome(msgspec.Struct):
    user_id: int


@contextlib.asynccontextmanager
async def running(app: App, url: str, queue: str) -> AsyncIterator[Worker]:
    worker = Worker(url, queues={queue: 1}, concurrency=4, grace=1.0)
    runner = asyncio.ensure_future(worker.run(app))
    try:
        yield worker
    finally:
        worker.stop(immediate=True)
        await asyncio.wait_for(runner, 20)


def test_typed_task_round_trip_with_trace_context(url: str) -> None:
    """Welcome(user_id=42) enqueued by Client arrives decoded in the handler, inside the producer's trace."""
    app = App()
    seen: list[tuple[Welcome, int]] = []

    @app.task("e2e:welcome", queue="e2e-app", retention=3600)
    async def send_welcome(payload: Welcome, ctx: TaskContext) -> None:
        seen.append((payload, trace.get_current_span().get_span_context().trace_id))

    async def main() -> None:
        async with Client(url) as client, running(app, url, "e2e-app"):
            parent = SpanContext(trace_id=TRACE_ID, span_id=0x1, is_remote=False, trace_flags=TraceFlags(1))
            with trace.use_span(NonRecordingSpan(parent)):
                info = await send_welcome.enqueue(client, Welcome(user_id=42), priority=7)
            assert info.queue == "e2e-app" and info.priority == 7

            async def done() -> bool:
                return (await client.get_task(info.id)).state is TaskState.COMPLETED

            await eventually(done, timeout=30, what="task completed")
        assert seen == [(Welcome(user_id=42), TRACE_ID)]

    asyncio.run(main())


def test_undecodable_payload_is_archived_without_retry(url: str) -> None:
    """A payload that does not fit the annotation ends ARCHIVED (SKIP_RETRY) with the codec's message."""
    app = App(tracing=False)

    @app.task("e2e:strict", queue="e2e-strict", max_retry=5)
    def strict(payload: Welcome, ctx: TaskContext) -> None:
        raise AssertionError("must not run")

    async def main() -> None:
        with SyncClient(url) as producer:  # a producer that ignores the typed definition
            info = producer.enqueue(
                "e2e:strict", {"user_id": "not-a-number"}, queue="e2e-strict", max_retry=5
            )
        async with Client(url) as client, running(app, url, "e2e-strict"):

            async def archived() -> bool:
                return (await client.get_task(info.id)).state is TaskState.ARCHIVED

            await eventually(archived, timeout=30, what="task archived")
            final = await client.get_task(info.id)
        assert (
            final.retried == 0
            and "cannot decode payload" in final.last_error
            and "Welcome" in final.last_error
        )

    asyncio.run(main())
