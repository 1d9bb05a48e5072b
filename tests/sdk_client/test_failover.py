"""Producer failover over several real reference servers, and the client-assigned task id."""

from __future__ import annotations

import asyncio
import socket

import pytest

from conveyor_sdk.client import Client, SyncClient
from conveyor_sdk.errors import DuplicateTask
from conveyor_server_min.testing import ServerProcess
from tests.conftest import FAST_ARGS
from tests.sdk_client.test_retry_and_errors import LostAnswer, _client


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
