"""client.admin cron, limits, groups, info, server_version and watch_events against the real server.

The async-only cases meet it in-process over in-memory connections, the others over a socket."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest

from conveyor_sdk.client import (
    Client,
    ConcurrencyLimit,
    GroupConfig,
    RateLimit,
    SyncClient,
    TaskEventType,
    ValidationError,
)
from conveyor_sdk.errors import InvalidArgument, NotFound
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_sdk.types import RetryPolicy, RetryStrategy, TaskState
from tests._util import wait_until


def uid(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_cron_round_trip_sync(url: str) -> None:
    """upsert_cron stores payload and options; get/pause/resume/delete act on the entry."""
    cid, queue = uid("cron"), uid()
    with SyncClient(url) as client:
        policy = RetryPolicy(RetryStrategy.FIXED, base=2)
        client.admin.upsert_cron(cid, "0 0 2 * * *", "nightly", {"a": 1}, queue=queue, priority=3,
                                 timeout=timedelta(seconds=30), retry_policy=policy)  # fmt: skip
        entry = client.admin.get_cron(cid)
        assert (entry.type, entry.queue, entry.payload, entry.priority) == ("nightly", queue, b'{"a":1}', 3)
        assert entry.timeout == timedelta(seconds=30) and entry.retry_policy is not None
        assert entry.retry_policy.strategy is RetryStrategy.FIXED and entry.retry_policy.base == timedelta(
            seconds=2
        )
        client.admin.pause_cron(cid)
        assert client.admin.get_cron(cid).paused is True
        client.admin.resume_cron(cid)
        assert client.admin.get_cron(cid).paused is False
        client.admin.delete_cron(cid)
        with pytest.raises(NotFound):
            client.admin.get_cron(cid)
        with pytest.raises(InvalidArgument, match="invalid cron spec"):
            client.admin.upsert_cron(cid, "every day", "t")
        with pytest.raises(ValidationError, match="cannot carry process_in"):
            client.admin.upsert_cron(cid, "* * * * * *", "t", process_in=5)  # type: ignore[call-arg]
        with pytest.raises(NotFound):
            client.admin.pause_cron("no-such-entry")


def test_limits_and_groups_async(memory: Callable[..., MemoryServer]) -> None:
    """Rate, concurrency and group settings round-trip through the async client."""
    queue = uid()

    async def main() -> None:
        async with memory() as server, server.client() as client:
            admin = client.admin
            await admin.set_rate_limit(queue, 2.5, burst=4)
            assert RateLimit(queue, 2.5, 4) in await admin.list_rate_limits()
            await admin.set_concurrency_limit(queue, 2)
            assert ConcurrencyLimit(queue, 2) in await admin.list_concurrency_limits()
            await admin.set_group_config(
                queue, "g", max_size=5, max_delay=60, grace_period=timedelta(seconds=2)
            )
            expected = GroupConfig(queue, "g", 5, timedelta(seconds=60), timedelta(seconds=2))
            assert expected in await admin.list_group_configs()
            await admin.delete_rate_limit(queue)
            await admin.delete_concurrency_limit(queue)
            await admin.delete_group_config(queue, "g")
            assert queue not in {r.queue for r in await admin.list_rate_limits()}
            assert queue not in {c.queue for c in await admin.list_concurrency_limits()}
            assert queue not in {g.queue for g in await admin.list_group_configs()}

    asyncio.run(main())


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a: a.set_rate_limit("q", -1.0), "rate must be a finite number > 0"),
        (lambda a: a.set_rate_limit("q", float("inf")), "rate must be a finite number > 0"),
        (lambda a: a.set_rate_limit("q", 1.0, burst=0), "burst must be an integer >= 1"),
        (lambda a: a.set_concurrency_limit("q", 0), "max_active must be an integer >= 1"),
        (
            lambda a: a.set_group_config("q", max_size=1, max_delay=0, grace_period=1),
            "max_delay must be positive",
        ),
        (lambda a: a.set_rate_limit("bad queue", 1.0), "invalid queue name"),
    ],
)
def test_limit_validation_happens_before_the_network(call: object, message: str) -> None:
    """Bad values raise ValidationError without contacting the (unreachable) server."""
    with SyncClient("http://127.0.0.1:9") as client, pytest.raises(ValidationError, match=message):
        call(client.admin)  # type: ignore[operator]


def test_info_and_server_version(url: str) -> None:
    """cluster_info, broker_info and the Welcome-based server_version, sync and async."""
    with SyncClient(url) as client:
        nodes = client.admin.cluster_info()
        assert nodes and nodes[0].started_at is not None
        assert client.admin.broker_info().driver == "memory"
        version = client.admin.server_version()
        assert version.server_version and version.min_sdk_version
        # The probe closed its session; the server forgets it once the close reaches it.
        wait_until(lambda: client.admin.list_sessions() == [], 5.0, what="the probe session to go")

    async def main() -> str:
        async with Client(url) as client:
            return (await client.admin.server_version()).server_version

    assert asyncio.run(main()) == version.server_version


def test_watch_events_async(memory: Callable[..., MemoryServer]) -> None:
    """watch_events yields typed events filtered by queue and type."""
    queue = uid()

    async def main() -> None:
        async with memory() as server, server.client() as client:
            seen: list[str] = []

            async def produce() -> None:
                while True:  # until the watcher has subscribed and seen one
                    seen.append(uid("t"))  # recorded before the enqueue: the event may beat its answer
                    await client.enqueue("t", None, queue=queue, process_in=3600, task_id=seen[-1])
                    await asyncio.sleep(0.2)

            producer = asyncio.create_task(produce())
            try:
                events = client.admin.watch_events(queues=[queue], event_types=["scheduled"])
                event = await asyncio.wait_for(anext(events), 20)
                await events.aclose()
            finally:
                producer.cancel()
            assert event.id in seen and event.queue == queue
            assert event.event_type is TaskEventType.SCHEDULED and event.state is TaskState.SCHEDULED

    asyncio.run(main())
    with pytest.raises(ValueError, match="unknown event type"):
        TaskEventType.parse("exploded")


def test_watch_events_sync(url: str) -> None:
    """The blocking watch_events yields typed events while another thread enqueues."""
    queue, done = uid(), threading.Event()
    ids: list[str] = []

    def produce() -> None:
        with SyncClient(url) as producer:
            while not done.wait(0.2):  # until the watcher has subscribed and seen one
                ids.append(uid("t"))
                producer.enqueue("t", None, queue=queue, task_id=ids[-1])

    thread = threading.Thread(target=produce, daemon=True)
    with SyncClient(url) as client:
        events = client.admin.watch_events(queues=[queue], event_types=[TaskEventType.ENQUEUED])
        thread.start()
        try:
            event = next(events)
        finally:
            done.set()
            events.close()
            thread.join(10)
    assert event.id in ids and event.event_type is TaskEventType.ENQUEUED and event.state is TaskState.PENDING
