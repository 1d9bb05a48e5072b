"""A Worker on an in-process MemoryServer: its sessions connect through the server's dialer."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Callable

import pytest

from conveyor_sdk.errors import FailedPrecondition
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_sdk.types import TaskState
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker
from tests.sdk_worker._helpers import KEEP, running, wait_state


def test_a_worker_on_a_memory_server_runs_tasks_a_client_enqueued(
    memory: Callable[..., MemoryServer],
) -> None:
    """The server's URL names no real host: only the in-memory dialer can reach it."""
    reg = Registry()
    seen: list[bytes] = []

    @reg.handler("echo")
    async def echo(task: TaskData, ctx: TaskContext) -> bytes:
        seen.append(task.payload)
        return b"done"

    async def main() -> None:
        async with memory() as server, server.client() as client:
            host = urllib.parse.urlsplit(server.url).hostname or ""
            assert host.endswith(".invalid"), server.url  # RFC 6761: never resolves
            async with running(server.worker(concurrency=2), reg):
                ids = [(await client.enqueue("echo", f"p{i}".encode(), **KEEP)).id for i in range(3)]
                done = [await wait_state(client, tid, TaskState.COMPLETED) for tid in ids]
            assert [d.retried for d in done] == [0, 0, 0]
            assert sorted(seen) == [b"p0", b"p1", b"p2"]
            assert server.connections >= 2  # the client's and the worker's session

    asyncio.run(main())


def test_worker_refuses_a_dialer_that_is_not_callable() -> None:
    with pytest.raises(TypeError, match="dialer must be an async callable"):
        Worker("http://127.0.0.1:9", dialer="tcp")  # type: ignore[arg-type]


def test_a_worker_needs_a_started_memory_server(memory: Callable[..., MemoryServer]) -> None:
    with pytest.raises(FailedPrecondition):
        memory().worker()
