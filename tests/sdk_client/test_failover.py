"""Producer failover over several real reference servers, and the client-assigned task id."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from conveyor_sdk.client import Client, SyncClient, task
from conveyor_sdk.errors import DuplicateTask
from conveyor_sdk.testing.faultproxy import FaultProxy
from conveyor_server_min.testing import ServerProcess
from tests._util import eventually
from tests.conftest import FAST_ARGS
from tests.sdk_client.test_retry_and_errors import LostAnswer, _client

T = TypeVar("T")


def _dead() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("protocol", ["connect", "grpc"])
def test_client_skips_a_dead_node_and_sticks_to_the_live_one(url: str, protocol: str) -> None:
    """[dead, live]: the first enqueue moves on at once; later calls go straight to the live node."""

    async def main() -> None:
        async with Client([_dead(), url], protocol=protocol) as client:  # type: ignore[arg-type]
            info = await client.enqueue("fo:t", {"n": 1})
            assert len(info.id) == 26  # a client-assigned ULID
            assert (await client.get_task(info.id)).id == info.id
            stats = client.statistics()
            assert stats["failovers"] == 1 and stats["address"] == url and client.address == url

    asyncio.run(main())


def test_client_moves_on_when_its_node_is_killed() -> None:
    """Node a killed between two enqueues: the second lands on b; the sync client does the same."""
    with ServerProcess(FAST_ARGS) as a, ServerProcess(FAST_ARGS) as b:

        async def main() -> None:
            async with Client(f"{a.url},{b.url}") as client, Client(b.url) as on_b:
                await client.enqueue("fo:t")
                a.kill()
                second = await client.enqueue("fo:t")
                assert (await on_b.get_task(second.id)).id == second.id and client.address == b.url

        asyncio.run(main())
        with SyncClient([a.url, b.url]) as sync:
            task = sync.enqueue("fo:t")
            assert sync.get_task(task.id).id == task.id and sync.address == b.url


def test_a_repeated_enqueue_whose_first_attempt_landed_is_one_task() -> None:
    """No task_id given: the retry carries the client's id, so it reads back the one stored task."""

    async def main() -> None:
        service = LostAnswer()
        async with _client(service) as client:
            info = await client.enqueue("t", {"a": 1})
            assert list(service.stored) == [info.id]
            assert service.calls == ["Enqueue", "Enqueue", "GetTask"]

    asyncio.run(main())


def test_a_user_id_that_is_taken_still_raises(url: str) -> None:
    """A user-given id that exists on the server is DuplicateTask, with or without failover."""

    async def main() -> None:
        async with Client([_dead(), url]) as client:
            first = await client.enqueue("fo:t", task_id="01J00000000000000000000DUP")
            with pytest.raises(DuplicateTask):
                await client.enqueue("fo:t", task_id=first.id)
        async with Client([_dead(), url]) as fresh:  # the duplicate comes after a failover
            with pytest.raises(DuplicateTask):
                await fresh.enqueue("fo:t", task_id=first.id)

    asyncio.run(main())


async def _answer_lost(proxy: FaultProxy, committed: Callable[[], Awaitable[bool]], call: Awaitable[T]) -> T:
    """Run ``call`` through ``proxy`` so the server commits it but its answer never comes back."""
    proxy.blackhole("down")
    pending = asyncio.ensure_future(call)
    assert await eventually(committed, timeout=10, what="the server committed the call")
    proxy.reset()  # the connection dies after the commit: the caller sees unavailable
    return await pending


async def _count(client: Client, queue: str) -> int:
    return len((await client.admin.list_tasks(queue=queue, limit=100)).tasks)


@pytest.mark.parametrize("kind", ["batch", "tx"])
def test_a_batch_or_tx_whose_answer_was_lost_is_committed_once(url: str, kind: str) -> None:
    """No task_id given: the repeat on the next address carries the same ids and reads them back."""

    async def main() -> None:
        async with FaultProxy(url.removeprefix("http://")) as proxy, Client(url) as direct:
            q = f"lost-{kind}"
            async with Client([proxy.url, url], timeout=15.0) as client:
                specs = [task("fo:t", {"n": i}, queue=q) for i in range(3)]
                call = client.enqueue_batch(specs) if kind == "batch" else client.enqueue_tx(specs)
                got = await _answer_lost(proxy, lambda: _has(direct, q, 3), call)
                infos = [r.task for r in got] if kind == "batch" else got  # type: ignore[union-attr]
                assert client.statistics()["failovers"] >= 1
            assert all(i is not None and len(i.id) == 26 for i in infos)  # type: ignore[union-attr]
            assert await _count(direct, q) == 3  # one task each, not two
            stored = {t.id for t in (await direct.admin.list_tasks(queue=q, limit=100)).tasks}
            assert stored == {i.id for i in infos}  # type: ignore[union-attr]

    asyncio.run(main())


async def _has(client: Client, queue: str, n: int) -> bool:
    return await _count(client, queue) >= n
