"""The asyncio Worker against the real reference server: the protocol §9 checklist end to end.

The server runs in the test's event loop (MemoryServer): every session, task call and admin call
goes through the same HTTP/2 code as over TCP, with no subprocess and no socket. The worker over
real sockets and processes: tests/runtime/test_worker_e2e.py, test_worker_signals.py, test_failover.py."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from conveyor_sdk.errors import InvalidArgument, Unauthenticated
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_sdk.types import RetryPolicy, TaskState
from conveyor_sdk.worker import CancelReason, Registry, SkipRetry, TaskContext, TaskData, Worker
from tests._util import eventually
from tests.sdk_worker._helpers import KEEP, running, wait_state


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_outcome_mapping_end_to_end(memory: Callable[..., MemoryServer], protocol: str) -> None:
    """SUCCESS completes, SkipRetry archives, exceptions and SystemExit retry until exhausted."""
    reg = Registry()
    reg.handler("ok")(lambda t, c: b"result")

    @reg.handler("skip")
    def skip(task: TaskData, ctx: TaskContext) -> None:
        raise SkipRetry("bad input")

    @reg.handler("boom")
    async def boom(task: TaskData, ctx: TaskContext) -> None:
        raise ValueError("nope")

    @reg.handler("exit")
    def exit_(task: TaskData, ctx: TaskContext) -> None:
        raise SystemExit(3)

    async def main() -> None:
        async with (
            memory() as server,
            server.client() as client,
            running(server.worker(protocol=protocol), reg),
        ):
            ok = await client.enqueue("ok", b"", **KEEP)
            skip = await client.enqueue("skip", b"", **KEEP)
            boom = await client.enqueue("boom", b"", max_retry=1, retry_policy=_fast_retry(), **KEEP)
            ex = await client.enqueue("exit", b"", max_retry=1, retry_policy=_fast_retry(), **KEEP)
            await wait_state(client, ok.id, TaskState.COMPLETED)
            info = await wait_state(client, skip.id, TaskState.ARCHIVED)
            assert info.last_error == "bad input" and info.retried == 0
            info = await wait_state(client, boom.id, TaskState.ARCHIVED)
            assert "ValueError: nope" in info.last_error and info.retried == 1
            info = await wait_state(client, ex.id, TaskState.ARCHIVED)
            assert "SystemExit: 3" in info.last_error

    asyncio.run(main())


def _fast_retry() -> RetryPolicy:
    return RetryPolicy(base=0.05, max=0.1)


def test_concurrency_gate_and_all_results(memory: Callable[..., MemoryServer]) -> None:
    """Exactly `concurrency` handlers run at once, never more, and every task completes."""
    reg = Registry()
    active = {"now": 0, "max": 0}
    full = asyncio.Event()  # the first three wait for each other, so a gate of 1 or 2 shows

    @reg.handler("work")
    async def work(task: TaskData, ctx: TaskContext) -> None:
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        if active["now"] == 3:
            full.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(full.wait(), 5)
        await asyncio.sleep(0.05)
        active["now"] -= 1

    async def main() -> None:
        async with memory() as server, server.client() as client:
            # All twelve are ready before the worker connects: only its gate holds back the rest.
            ids = [(await client.enqueue("work", b"", **KEEP)).id for _ in range(12)]
            async with running(server.worker(concurrency=3), reg):
                for tid in ids:
                    await wait_state(client, tid, TaskState.COMPLETED)
        assert active["max"] == 3

    asyncio.run(main())


def test_long_handler_under_short_lease_keeps_retried_zero(memory: Callable[..., MemoryServer]) -> None:
    """A 5 s handler under a 2 s lease completes with retried == 0 (heartbeats move the lease).

    The real-time run against the server's lease; the sync handler and the group batch under a
    short lease run in virtual time (test_worker_virtual_time.py).
    """
    reg = Registry()

    @reg.handler("long")
    async def long_async(task: TaskData, ctx: TaskContext) -> bytes:
        await asyncio.sleep(5)
        return b"done"

    async def main() -> None:
        async with memory() as server, server.client() as client, running(server.worker(), reg):
            info = await client.enqueue("long", b"", **KEEP)
            done = await wait_state(client, info.id, TaskState.COMPLETED, timeout=40)
            assert done.retried == 0 and done.last_error == ""

    asyncio.run(main())


def test_group_is_one_batch_call_with_per_member_outcomes(memory: Callable[..., MemoryServer]) -> None:
    """A 3-member group is one batch call (one slot); a member's SkipRetry archives only it.

    The same batch running 3 s under a 2 s lease is heartbeated in virtual time
    (test_worker_virtual_time.py).
    """
    reg = Registry()
    calls: list[tuple[str, ...]] = []

    @reg.batch_handler("agg")
    async def agg(tasks: list[TaskData], ctx: TaskContext) -> dict[str, Any]:
        calls.append(ctx.ids)
        assert ctx.is_batch and ctx.group == "g1"
        return {tasks[1].id: SkipRetry("second is bad")}

    async def main() -> None:
        async with memory() as server, server.client() as client, running(server.worker(concurrency=1), reg):
            ids = [(await client.enqueue("agg", b"", group="g1", **KEEP)).id for _ in range(3)]
            a = await wait_state(client, ids[0], TaskState.COMPLETED, timeout=40)
            b = await wait_state(client, ids[1], TaskState.ARCHIVED, timeout=40)
            c = await wait_state(client, ids[2], TaskState.COMPLETED, timeout=40)
            assert (a.retried, b.retried, c.retried) == (0, 0, 0)
            assert b.last_error == "second is bad"
        assert calls == [tuple(ids)]

    asyncio.run(main())


def test_task_timeout_cancels_with_deadline_reason(memory: Callable[..., MemoryServer]) -> None:
    """A handler running past start + timeout is cancelled (DEADLINE) and the task retries."""
    reg = Registry()
    reasons: list[CancelReason | None] = []

    @reg.handler("stuck")
    async def stuck(task: TaskData, ctx: TaskContext) -> None:
        try:
            await asyncio.sleep(30)
        finally:
            reasons.append(ctx.cancel_reason)

    async def main() -> None:
        async with memory() as server, server.client() as client, running(server.worker(), reg):
            info = await client.enqueue(
                "stuck", b"", timeout=1, max_retry=1, retry_policy=_fast_retry(), **KEEP
            )
            t0 = time.monotonic()
            done = await wait_state(client, info.id, TaskState.ARCHIVED)
            assert done.last_error == "retries exhausted: deadline exceeded" and done.retried == 1
            assert time.monotonic() - t0 < 20
        assert reasons == [CancelReason.DEADLINE, CancelReason.DEADLINE]

    asyncio.run(main())


def test_admin_cancel_reaches_running_handler(memory: Callable[..., MemoryServer]) -> None:
    """Admin CancelTask on an ACTIVE task -> Cancel frame -> handler cancelled (SERVER_CANCEL)."""
    reg = Registry()
    started = threading.Event()
    reasons: list[CancelReason | None] = []

    @reg.handler("victim")
    def victim(task: TaskData, ctx: TaskContext) -> None:
        started.set()
        ctx.wait_cancelled(30)
        reasons.append(ctx.cancel_reason)
        ctx.raise_if_cancelled()

    async def main() -> None:
        async with memory() as server, server.client() as client, running(server.worker(), reg):
            info = await client.enqueue("victim", b"", **KEEP)
            await asyncio.get_running_loop().run_in_executor(None, started.wait, 20)
            await client.admin.cancel_task(info.id)
            done = await wait_state(client, info.id, TaskState.ARCHIVED)
            assert "canceled by server" in done.last_error
        assert reasons == [CancelReason.SERVER_CANCEL]

    asyncio.run(main())


def test_progress_reaches_the_server(memory: Callable[..., MemoryServer]) -> None:
    """report_progress from a sync handler thread is sent (coalesced) and visible via GetTask."""
    reg = Registry()
    gate = threading.Event()

    @reg.handler("prog")
    def prog(task: TaskData, ctx: TaskContext) -> None:
        for pct in range(0, 61, 10):
            ctx.report_progress(pct, f"at {pct}")
        gate.wait(30)

    async def main() -> None:
        async with (
            memory() as server,
            server.client() as client,
            running(server.worker(progress_interval=0.2), reg),
        ):
            info = await client.enqueue("prog", b"", **KEEP)

            async def seen() -> bool:
                t = await client.get_task(info.id)
                return t.progress == 60 and t.progress_message == "at 60"

            await eventually(seen, timeout=20)
            gate.set()
            await wait_state(client, info.id, TaskState.COMPLETED)

    asyncio.run(main())


def test_drain_finishes_in_flight_then_returns(memory: Callable[..., MemoryServer]) -> None:
    """stop() during a task: it finishes within grace and reports its real outcome; run() returns."""
    reg = Registry()
    started = asyncio.Event()

    @reg.handler("job")
    async def job(task: TaskData, ctx: TaskContext) -> bytes:
        started.set()
        await asyncio.sleep(1)
        return b"finished"

    async def main() -> None:
        async with memory() as server, server.client() as client:
            worker = server.worker(grace=20)
            async with running(worker, reg) as task:
                info = await client.enqueue("job", b"", **KEEP)
                await asyncio.wait_for(started.wait(), 20)
                worker.stop()
                await asyncio.wait_for(task, 20)
            done = await wait_state(client, info.id, TaskState.COMPLETED)
            assert done.retried == 0
            assert worker.statistics()["results"] == {"SUCCESS": 1}

    asyncio.run(main())


def test_drain_grace_end_releases_without_retry(memory: Callable[..., MemoryServer]) -> None:
    """A task still running at grace end is cancelled (DRAIN) and RELEASED: retried stays 0."""
    reg = Registry()
    started = asyncio.Event()
    reasons: list[CancelReason | None] = []

    @reg.handler("slow")
    async def slow(task: TaskData, ctx: TaskContext) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            reasons.append(ctx.cancel_reason)

    async def main() -> None:
        async with memory() as server, server.client() as client:
            worker = server.worker(grace=0.5)
            async with running(worker, reg):
                info = await client.enqueue("slow", b"", **KEEP)
                await asyncio.wait_for(started.wait(), 20)
            after = await client.get_task(info.id)
            assert after.state == TaskState.PENDING and after.retried == 0
        assert reasons == [CancelReason.DRAIN]
        assert worker.statistics()["results"] == {"RELEASED": 1}

    asyncio.run(main())


def test_zero_weight_refused_locally() -> None:
    """A zero queue weight (or bad name/concurrency) raises InvalidArgument at construction, no dialing."""
    for kwargs in ({"queues": {"q": 0}}, {"queues": {"bad name": 1}}, {"concurrency": 0}, {"queues": {}}):
        with pytest.raises(InvalidArgument):
            Worker("http://127.0.0.1:9", **kwargs)  # type: ignore[arg-type]


def test_unauthenticated_is_fatal(memory: Callable[..., MemoryServer]) -> None:
    """A wrong token ends run() with Unauthenticated after a single attempt (no reconnect loop)."""
    reg = Registry()
    reg.handler("t")(lambda t, c: None)

    async def main() -> None:
        async with memory(tokens=("s3cret",)) as server:
            worker = server.worker(token="wrong")
            with pytest.raises(Unauthenticated):
                await asyncio.wait_for(worker.run(Registry()), 30)
            assert worker.statistics()["active"] is False

            async with server.client(token="s3cret") as client, running(server.worker(token="s3cret"), reg):
                info = await client.enqueue("t", b"", **KEEP)
                await wait_state(client, info.id, TaskState.COMPLETED)

    asyncio.run(main())


def test_min_server_version_too_new_is_fatal(memory: Callable[..., MemoryServer]) -> None:
    """Demanding a newer server than the running one fails with invalid_argument, no retry loop."""

    async def main() -> None:
        async with memory() as server:
            worker = server.worker(min_server_version="v99.0.0")
            with pytest.raises(InvalidArgument):
                await asyncio.wait_for(worker.run(Registry()), 30)
            assert worker.statistics()["connections"] == 1

    asyncio.run(main())
