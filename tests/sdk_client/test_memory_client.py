"""Client(dialer=): every call, admin included, goes through the dialer; bad dialers are refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from conveyor_sdk.client import Client, TaskEventType
from conveyor_sdk.errors import FailedPrecondition
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_sdk.types import TaskState

from .conftest import memory_server


def test_every_call_goes_through_the_dialer(memory: Callable[..., MemoryServer]) -> None:
    """Task calls, admin unary calls, watch_events and server_version's handshake all use the dialer.

    The server's URL names no real host (``in-memory.invalid``), so a call that went to the
    network would fail; the dialer counts the connections it opened."""
    dialed: list[str] = []

    async def main() -> None:
        async with memory() as server:

            async def dial(*args: Any, **kwargs: Any) -> Any:
                dialed.append(args[1].host)
                return await server.dial(*args, **kwargs)

            async with Client(server.url, dialer=dial) as client:
                info = await client.enqueue("mem", {"n": 1}, queue="mem")
                assert (await client.get_task(info.id)).decode() == {"n": 1}
                events = client.admin.watch_events(queues=["mem"], event_types=["enqueued"])
                producer = asyncio.create_task(_enqueue_until_cancelled(client))
                try:  # the stream may open after the first enqueues: they repeat until one is seen
                    event = await asyncio.wait_for(anext(events), 10)
                finally:
                    producer.cancel()
                    await events.aclose()
                assert event.queue == "mem" and event.event_type is TaskEventType.ENQUEUED
                queues = {q.name: q for q in await client.admin.list_queues()}
                assert queues["mem"].counts[TaskState.PENDING] >= 2
                assert (await client.admin.server_version()).server_version
            # one HTTP/2 connection shared by task and admin calls, one for the version handshake
            assert len(dialed) == 2 == server.connections

    asyncio.run(main())


async def _enqueue_until_cancelled(client: Client) -> None:
    while True:
        await client.enqueue("mem", queue="mem")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"dialer": 3}, TypeError, "dialer must be a callable"),
        ({"dialer": print, "transport": object()}, TypeError, "not both"),
        ({"dialer": print, "http2": False}, ValueError, "HTTP/2"),
    ],
    ids=["not callable", "with transport", "http1"],
)
def test_bad_dialer_is_refused(options: dict[str, Any], error: type[Exception], match: str) -> None:
    """A non-callable dialer, a dialer with transport=, or with http2=False fail at construction."""
    with pytest.raises(error, match=match):
        Client("http://example.invalid", **options)


def test_client_of_a_memory_server_that_is_not_started() -> None:
    """MemoryServer.client() before start() is a FailedPrecondition, not a client with no address."""
    with pytest.raises(FailedPrecondition, match="start the MemoryServer"):
        memory_server().client()
