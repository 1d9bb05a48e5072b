"""Producer against conveyord: §6.1 options, batch, tx, get, error codes, bearer auth, both protocols."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from conveyor_sdk.client import Client, SyncClient, task
from conveyor_sdk.errors import ConveyorError, DuplicateTask, InvalidArgument, NotFound, Unauthenticated
from conveyor_sdk.testing.faultproxy import FaultProxy
from conveyor_sdk.types import Dependency, OnFailure, RetryPolicy, RetryStrategy, TaskState
from tests._util import eventually
from tests.interop._conveyord import Conveyord

PROTOCOLS = ["connect", "grpc"]


def uid(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_enqueue_option_round_trips(cv_url: str, protocol: str) -> None:
    """Each §6.1 option given to Enqueue is stored by conveyord and read back by GetTask."""

    async def main() -> None:
        async with Client(cv_url, protocol=protocol) as client:
            tid = uid()
            info = await client.enqueue(
                "email:welcome",
                {"user_id": 42},
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
            assert (got.queue, got.type, got.state) == ("emails", "email:welcome", TaskState.SCHEDULED)
            assert got.decode() == {"user_id": 42}
            assert got.process_at is not None and got.process_at > datetime.now(UTC) + timedelta(minutes=59)

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_initial_states_from_options(cv_url: str, protocol: str) -> None:
    """Defaults give PENDING; depends_on gives BLOCKED, group AGGREGATING, process_at SCHEDULED."""

    async def main() -> None:
        async with Client(cv_url, protocol=protocol) as client:
            plain = await client.enqueue("plain", queue=uid("q"))
            assert (plain.priority, plain.state) == (4, TaskState.PENDING)
            blocked = await client.enqueue(
                "child", depends_on=[Dependency(plain.id, OnFailure.CASCADE_CANCEL)]
            )
            assert blocked.state is TaskState.BLOCKED
            grouped = await client.enqueue("digest", group=uid("g"))
            assert grouped.state is TaskState.AGGREGATING
            later = await client.enqueue("later", process_at=datetime.now(UTC) + timedelta(hours=2))
            assert later.state is TaskState.SCHEDULED

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_batch_and_tx(cv_url: str, protocol: str) -> None:
    """EnqueueBatch answers per item (a bad one fails alone); EnqueueTx commits all or none."""

    async def main() -> None:
        async with Client(cv_url, protocol=protocol) as client:
            key = uid("u")
            results = await client.enqueue_batch(
                [task("a", b"1"), task("b", b"2", unique_key=key), task("c", b"3", unique_key=key)]
            )
            assert [r.ok for r in results] == [True, True, False]
            assert results[2].error
            infos = await client.enqueue_tx([task("x", b""), task("y", b"")])
            assert len(infos) == 2 and all(i.state is TaskState.PENDING for i in infos)
            taken = uid("u")
            await client.enqueue("held", unique_key=taken)
            with pytest.raises(ConveyorError):
                await client.enqueue_tx([task("z1", b"", task_id=uid()), task("z2", b"", unique_key=taken)])

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_error_codes(cv_url: str, protocol: str) -> None:
    """not_found, invalid_argument and already_exists (unique key) arrive as their typed errors."""

    async def main() -> None:
        async with Client(cv_url, protocol=protocol) as client:
            with pytest.raises(NotFound):
                await client.get_task(uid("missing"))
            with pytest.raises(InvalidArgument):
                await client.enqueue("")
            key = uid("u")
            await client.enqueue("once", unique_key=key, unique_ttl=60)
            with pytest.raises(DuplicateTask):
                await client.enqueue("once", unique_key=key, unique_ttl=60)

    asyncio.run(main())


def test_repeated_task_id_is_echoed(cv_url: str) -> None:
    """A repeated task id is answered with the stored task (§15.1), not already_exists."""
    with SyncClient(cv_url) as client:
        tid = uid()
        first = client.enqueue("dup", b"1", task_id=tid)
        second = client.enqueue("dup", b"1", task_id=tid)
        assert first.id == second.id == tid


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bearer_auth(node_factory: Callable[..., Conveyord], protocol: str) -> None:
    """With auth tokens: no token and a wrong one are unauthenticated, the right one is accepted."""
    node = node_factory(tokens=("s3cret",))

    async def main() -> None:
        async with Client(node.url, protocol=protocol) as anon:
            with pytest.raises(Unauthenticated):
                await anon.enqueue("x")
        async with Client(node.url, protocol=protocol, token="wrong") as bad:
            with pytest.raises(Unauthenticated):
                await bad.get_task(uid())
        async with Client(node.url, protocol=protocol, token="s3cret") as good:
            info = await good.enqueue("x")
            assert (await good.get_task(info.id)).id == info.id

    asyncio.run(main())


def test_sync_client_json_wire_format(cv_url: str) -> None:
    """The blocking client with the JSON wire format enqueues and reads back against conveyord."""
    with SyncClient(cv_url, wire_format="json") as client:
        info = client.enqueue("json:type", {"k": [1, 2]})
        assert client.get_task(info.id).decode() == {"k": [1, 2]}


async def _queue_ids(client: Client, queue: str) -> set[str]:
    return {t.id for t in (await client.admin.list_tasks(queue=queue, limit=100)).tasks}


@pytest.mark.parametrize("kind", ["batch", "tx"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_batch_and_tx_items_carry_client_ids_and_a_repeat_is_one_set(
    cv_url: str, protocol: str, kind: str
) -> None:
    """Items without task_id get client ULIDs; sending the same items again (same ids) is not a
    second set of tasks: conveyord echoes each repeated id (§15.1), the queue keeps three."""

    async def main() -> None:
        async with Client(cv_url, protocol=protocol) as client:
            q = uid(f"ids-{kind}")
            specs = [task("ids:t", {"n": i}, queue=q) for i in range(3)]

            async def send(items: list[object]) -> list[str]:
                if kind == "batch":
                    got = await client.enqueue_batch(items)  # type: ignore[arg-type]
                    assert all(r.ok and r.task is not None for r in got), got
                    return [r.task.id for r in got if r.task is not None]
                return [i.id for i in await client.enqueue_tx(items)]  # type: ignore[arg-type]

            first = await send(specs)
            assert len(set(first)) == 3 and all(len(i) == 26 and i.isalnum() for i in first)
            again = [task("ids:t", {"n": i}, queue=q, task_id=tid) for i, tid in enumerate(first)]
            assert await send(again) == first  # echoed, not already_exists (§15.1)
            assert await _queue_ids(client, q) == set(first)  # one task each, not two

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["batch", "tx"])
def test_batch_or_tx_whose_answer_was_lost_commits_once(conveyord: Conveyord, kind: str) -> None:
    """The first address commits and its answer is lost; the retry on the second address carries
    the same client-assigned ids, so conveyord holds one task per item, not two."""
    direct_url = conveyord.url

    async def main() -> None:
        target = direct_url.removeprefix("http://")
        async with FaultProxy(target) as proxy, Client(direct_url) as direct:
            q = uid(f"lost-{kind}")
            async with Client([proxy.url, direct_url], timeout=15.0) as client:
                specs = [task("ids:t", {"n": i}, queue=q) for i in range(3)]
                call = client.enqueue_batch(specs) if kind == "batch" else client.enqueue_tx(specs)
                proxy.blackhole("down")  # the server commits; its answer never comes back
                pending = asyncio.ensure_future(call)

                async def committed() -> bool:
                    return len(await _queue_ids(direct, q)) >= 3

                await eventually(committed, timeout=10, what="conveyord committed the call")
                proxy.reset()  # the caller sees unavailable and repeats on the next address
                got = await pending
                assert client.statistics()["failovers"] >= 1
            infos = [r.task for r in got] if kind == "batch" else got  # type: ignore[union-attr]
            ids = {i.id for i in infos if i is not None}  # type: ignore[union-attr]
            assert len(ids) == 3 and await _queue_ids(direct, q) == ids

    asyncio.run(main())
