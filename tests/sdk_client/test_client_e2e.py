"""Client against the real reference server: every option, the three enqueue RPCs, errors, protocols.

The async Client meets it in-process over in-memory connections; SyncClient, HTTP/1.1, a closed
port and auth flags use a server subprocess on a socket."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from conveyor_sdk.client import Client, RetryConfig, SyncClient, task
from conveyor_sdk.codecs import OCTET_STREAM
from conveyor_sdk.errors import DuplicateTask, InvalidArgument, NotFound, Unauthenticated, Unavailable
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_sdk.types import Dependency, OnFailure, RetryPolicy, RetryStrategy, TaskState
from conveyor_server_min.testing import ServerProcess


def uid(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_enqueue_with_every_option_and_read_it_back(memory: Callable[..., MemoryServer]) -> None:
    """Options reach the server: state, priority, max_retry, queue, payload and content type round-trip."""

    async def main() -> None:
        async with memory() as server, server.client() as client:
            tid = uid()
            info = await client.enqueue(
                "email:welcome",
                {"user_id": 42, "html": "<b>"},
                task_id=tid,
                queue="emails",
                metadata={"tenant": "acme"},
                max_retry=7,
                timeout=timedelta(seconds=30),
                deadline=datetime.now(UTC) + timedelta(hours=1),
                process_in=3600,
                unique_key=uid("u"),
                unique_ttl=60,
                priority=9,
                retention=timedelta(hours=1),
                expires_in=7200,
                concurrency_key="tenant-acme",
                retry_policy=RetryPolicy(strategy=RetryStrategy.FIXED, base=1, max=5),
            )
            assert (info.id, info.state, info.priority, info.max_retry) == (tid, TaskState.SCHEDULED, 9, 7)
            got = await client.get_task(tid)
            assert got.queue == "emails" and got.type == "email:welcome" and got.state is TaskState.SCHEDULED
            assert got.payload == b'{"html":"\\u003cb\\u003e","user_id":42}' and got.decode() == {
                "user_id": 42,
                "html": "<b>",
            }
            assert got.enqueued_at is not None and got.enqueued_at.tzinfo is not None
            assert got.process_at is not None and got.process_at > datetime.now(UTC) + timedelta(minutes=59)

    asyncio.run(main())


def test_server_defaults_and_initial_states(memory: Callable[..., MemoryServer]) -> None:
    """Defaults (queue default, priority 4, max_retry 25) and PENDING/BLOCKED/AGGREGATING initial states."""

    async def main() -> None:
        async with memory() as server, server.client() as client:
            plain = await client.enqueue("plain")
            assert (plain.queue, plain.priority, plain.max_retry, plain.state) == (
                "default",
                4,
                25,
                TaskState.PENDING,
            )
            blocked = await client.enqueue(
                "child", depends_on=[Dependency(plain.id, OnFailure.CASCADE_CANCEL)]
            )
            assert blocked.state is TaskState.BLOCKED
            grouped = await client.enqueue("digest", group=uid("g"))
            assert grouped.state is TaskState.AGGREGATING
            raw = await client.enqueue("blob", b"\x00\x01")
            assert (await client.get_task(raw.id)).content_type == OCTET_STREAM
            past = await client.enqueue("due", process_at=datetime.now(UTC) - timedelta(seconds=5))
            assert past.state is TaskState.PENDING

    asyncio.run(main())


def test_duplicates_and_not_found(memory: Callable[..., MemoryServer]) -> None:
    """A repeated task_id or a live unique_key is DuplicateTask; an unknown id is NotFound."""

    async def main() -> None:
        async with memory() as server, server.client() as client:
            tid, key = uid(), uid("u")
            await client.enqueue("t", task_id=tid)
            with pytest.raises(DuplicateTask):
                await client.enqueue("t", task_id=tid)
            await client.enqueue("t", unique_key=key)
            with pytest.raises(DuplicateTask):
                await client.enqueue("t", unique_key=key)
            with pytest.raises(NotFound):
                await client.get_task(uid("missing"))

    asyncio.run(main())


def test_enqueue_batch_reports_per_item_results(memory: Callable[..., MemoryServer]) -> None:
    """EnqueueBatch commits good items and reports the bad one's error in its position."""

    async def main() -> None:
        async with memory() as server, server.client() as client:
            key = uid("u")
            results = await client.enqueue_batch(
                [task("a", 1, unique_key=key), task("b", 2, unique_key=key), task("c", 3)]
            )
            assert [r.ok for r in results] == [True, False, True]
            assert results[1].task is None and results[1].error
            assert results[2].task is not None and results[2].task.type == "c"

    asyncio.run(main())


def test_enqueue_tx_is_atomic(memory: Callable[..., MemoryServer]) -> None:
    """EnqueueTx commits all in order, or nothing when one item collides."""

    async def main() -> None:
        async with memory() as server, server.client() as client:
            ids = [uid(), uid()]
            tasks = await client.enqueue_tx([task("a", 1, task_id=ids[0]), task("b", 2, task_id=ids[1])])
            assert [t.id for t in tasks] == ids
            key, fresh = uid("u"), uid()
            with pytest.raises(DuplicateTask):
                await client.enqueue_tx([task("a", task_id=fresh, unique_key=key), task("b", unique_key=key)])
            with pytest.raises(NotFound):
                await client.get_task(fresh)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("protocol", "wire_format"), [("connect", "json"), ("grpc", "proto"), ("grpc", "json")]
)
def test_every_protocol_and_wire_format(
    memory: Callable[..., MemoryServer], protocol: str, wire_format: str
) -> None:
    """Connect/gRPC with proto/JSON all enqueue, read back and surface errors the same way."""

    async def main() -> None:
        async with memory() as server, server.client(protocol=protocol, wire_format=wire_format) as client:  # type: ignore[arg-type]
            info = await client.enqueue("x", {"n": 1}, process_in=60, depends_on=[])
            assert (await client.get_task(info.id)).state is TaskState.SCHEDULED
            with pytest.raises(NotFound):
                await client.get_task(uid())

    asyncio.run(main())


def test_sync_client_is_thread_safe(url: str) -> None:
    """One SyncClient shared by 4 threads enqueues 40 distinct tasks."""
    with SyncClient(url) as client:
        with ThreadPoolExecutor(4) as pool:
            infos = list(pool.map(lambda i: client.enqueue("thread", {"i": i}), range(40)))
        assert len({i.id for i in infos}) == 40
        assert client.get_task(infos[0].id).decode() == {"i": 0}
        with pytest.raises(DuplicateTask):
            client.enqueue("t", task_id=infos[0].id)


def test_server_rejections_surface_as_invalid_argument(url: str) -> None:
    """What only the server checks (here: an empty id on an admin action bypassing validation) is typed."""
    with SyncClient(url) as client:
        with pytest.raises(InvalidArgument):
            client.get_task("")
        with pytest.raises(ValueError, match="priority"):
            client.enqueue("t", priority=11)


def test_unreachable_server_is_unavailable() -> None:
    """A closed port raises Unavailable (retried for safe calls, then surfaced)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fast = RetryConfig(attempts=2, base=0.001, max_delay=0.002)
    with SyncClient(f"http://127.0.0.1:{port}", retry=fast, timeout=5) as client:
        with pytest.raises(Unavailable) as info:
            client.get_task("x")
        assert info.value.retryable and client.statistics()["calls"] == 2


def test_bearer_token_is_sent(server_factory: Callable[..., ServerProcess]) -> None:
    """With auth on, a missing/wrong token is Unauthenticated and the right one works."""
    srv = server_factory(["--token", "s3cret"])
    with SyncClient(srv.url) as anonymous, pytest.raises(Unauthenticated):
        anonymous.enqueue("t")
    with SyncClient(srv.url, token="wrong") as wrong, pytest.raises(Unauthenticated):
        wrong.get_task("x")
    with SyncClient(srv.url, token="s3cret") as good:
        assert good.enqueue("t").state is TaskState.PENDING


def test_connect_over_http1(url: str) -> None:
    """http2=False speaks Connect over HTTP/1.1; gRPC refuses to be configured without HTTP/2."""
    with SyncClient(url, http2=False) as client:
        info = client.enqueue("h1", {"v": 1})
        assert client.get_task(info.id).decode() == {"v": 1}
    with pytest.raises(ValueError, match="needs HTTP/2"):
        SyncClient(url, http2=False, protocol="grpc")


@pytest.mark.parametrize("wire_format", ["proto", "json"])
def test_async_connect_over_http1(url: str, wire_format: str) -> None:
    """Async Client, http2=False: the same task-call stub, its bytes moved by pyqwest over HTTP/1.1."""

    async def main() -> None:
        async with Client(url, http2=False, wire_format=wire_format) as client:  # type: ignore[arg-type]
            info = await client.enqueue("h1", {"v": 1}, queue="h1")
            assert (await client.get_task(info.id)).decode() == {"v": 1}
            results = await client.enqueue_batch([task("h1", 1), task("h1", 2)])
            assert all(r.ok for r in results)
            with pytest.raises(NotFound):
                await client.get_task(uid())
            with pytest.raises(DuplicateTask):
                await client.enqueue("h1", task_id=info.id)

    asyncio.run(main())


def test_async_http1_unreachable_server_is_unavailable() -> None:
    """Over HTTP/1.1 a closed port is a retryable Unavailable, retried for a safe call, then raised."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fast = RetryConfig(attempts=2, base=0.001, max_delay=0.002)

    async def main() -> None:
        async with Client(f"http://127.0.0.1:{port}", http2=False, retry=fast, timeout=5) as client:
            with pytest.raises(Unavailable) as info:
                await client.get_task("x")
            assert info.value.retryable and client.statistics()["calls"] == 2

    asyncio.run(main())
