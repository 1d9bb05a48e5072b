"""Sealed payloads through a real server and Worker: server sees ciphertext, handlers see plaintext."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from conveyor_sdk.app import App
from conveyor_sdk.client import Client, SyncClient, TaskSpec
from conveyor_sdk.encryption import MARKER_KEY, Key, Keyring
from conveyor_sdk.types import RetryPolicy, RetryStrategy, TaskInfo, TaskState
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker
from tests._util import eventually

OLD = Key("2026-q2", b"\x02" * 32)
NEW = Key("2026-q3", b"\x03" * 32)
FAST_RETRY = RetryPolicy(RetryStrategy.FIXED, base=0.05, max=0.05)


class Order(msgspec.Struct):
    order_id: int


@contextlib.asynccontextmanager
async def running(registry: Registry, url: str, queue: str, **kw: Any) -> AsyncIterator[Worker]:
    worker = Worker(url, queues={queue: 1}, concurrency=4, grace=1.0, **kw)
    runner = asyncio.ensure_future(worker.run(registry))
    try:
        yield worker
    finally:
        worker.stop(immediate=True)
        await asyncio.wait_for(runner, 20)


async def settled(client: Client, task_id: str, state: TaskState) -> TaskInfo:
    async def check() -> TaskInfo | None:
        info = await client.get_task(task_id)
        return info if info.state is state else None

    found = await eventually(check, timeout=30, what=f"{task_id} {state.name}")
    assert found is not None
    return found


def test_sealed_and_plain_tasks_share_a_queue(url: str) -> None:
    """The server stores ciphertext; the handler gets the plaintext and metadata without the marker."""
    seen: list[tuple[bytes, dict[str, str]]] = []
    reg = Registry()

    @reg.handler("enc:raw")
    async def handle(task: TaskData, ctx: TaskContext) -> None:
        seen.append((task.payload, dict(ctx.task.metadata)))

    ring = Keyring(NEW, retired=[OLD])

    async def main() -> None:
        async with Client(url, encryption=Keyring(OLD)) as old_producer:
            sealed_old = await old_producer.enqueue(
                "enc:raw", {"n": 1}, queue="enc-a", metadata={"k": "v"}, retention=600
            )
        async with Client(url, encryption=ring) as client:
            sealed_new = await client.enqueue("enc:raw", {"n": 2}, queue="enc-a", retention=600)
        async with Client(url) as plain, running(reg, url, "enc-a", encryption=ring):
            clear = await plain.enqueue("enc:raw", {"n": 3}, queue="enc-a", retention=600)
            for info in (sealed_old, clear):
                await settled(plain, info.id, TaskState.COMPLETED)
            stored = await settled(plain, sealed_new.id, TaskState.COMPLETED)
        assert stored.payload[:1] == b"\x01" and b'"n"' not in stored.payload
        assert ring.decrypt(stored.payload) == b'{"n":2}'

    asyncio.run(main())
    payloads = sorted(seen)
    assert [p for p, _ in payloads] == [b'{"n":1}', b'{"n":2}', b'{"n":3}']
    assert all(MARKER_KEY not in meta for _, meta in payloads)
    assert {"k": "v"}.items() <= dict(payloads[0][1]).items()


@pytest.mark.parametrize(
    ("worker_keys", "producer", "retried", "needle"),
    [
        (None, Keyring(NEW), 1, "has no encryption keys"),
        (Keyring(OLD), Keyring(NEW), 1, "key id '2026-q3'"),
        (Keyring(Key("2026-q3", b"\x09" * 32)), Keyring(NEW), 1, "authentication failed"),
        (Keyring(NEW), "short", 0, "truncated"),
    ],
    ids=["no-keys", "unknown-key", "bad-tag", "malformed"],
)
def test_undecryptable_tasks_never_reach_the_handler(
    url: str, worker_keys: Keyring | None, producer: Any, retried: int, needle: str
) -> None:
    """Each failure is reported naming the task; malformed bytes skip retries, the others burn one."""
    reg = Registry()
    ran: list[str] = []

    @reg.handler("enc:fail")
    def handle(task: TaskData, ctx: TaskContext) -> None:
        ran.append(task.id)

    class Short:
        def encrypt(self, plaintext: bytes) -> bytes:
            return b"\x01\x02k"

        def decrypt(self, ciphertext: bytes) -> bytes:
            return ciphertext

    sealer = Short() if producer == "short" else producer
    queue = f"enc-fail-{retried}-{needle[:4].replace(' ', '')}".replace("'", "")

    async def main() -> TaskInfo:
        async with Client(url, encryption=sealer) as client, running(reg, url, queue, encryption=worker_keys):
            info = await client.enqueue(
                "enc:fail", {"x": 1}, queue=queue, max_retry=1, retry_policy=FAST_RETRY
            )
            final = await settled(client, info.id, TaskState.ARCHIVED)
            assert info.id in final.last_error
            return final

    final = asyncio.run(main())
    assert ran == []
    assert needle in final.last_error and final.retried == retried


def test_app_encryption_serves_typed_enqueue_batch_tx_and_worker(url: str) -> None:
    """App(encryption=...) seals typed enqueues through a plain client and opens them on its workers."""
    app = App(tracing=False, encryption=Keyring(NEW))
    got: list[int] = []

    @app.task("enc:order", queue="enc-app")
    async def order(payload: Order, ctx: TaskContext) -> None:
        got.append(payload.order_id)

    async def main() -> None:
        async with Client(url) as client, running(app, url, "enc-app"):
            one = await order.enqueue(client, Order(order_id=1), retention=600)
            specs = [order.spec(Order(order_id=2), retention=600), order.spec({"order_id": 3}, retention=600)]
            batch = await client.enqueue_batch(specs)
            tx = await client.enqueue_tx([order.spec(Order(order_id=4), retention=600)])
            ids = [one.id, *(r.task.id for r in batch if r.task), *(t.id for t in tx)]
            for task_id in ids:
                await settled(client, task_id, TaskState.COMPLETED)
            stored = await client.get_task(one.id)
        assert NEW.id.encode() in stored.payload[:12]

    asyncio.run(main())
    assert sorted(got) == [1, 2, 3, 4]


def test_sync_client_with_async_encryptor(url: str) -> None:
    """A coroutine-based encryptor works from SyncClient (no loop) and on the Worker."""
    ring = Keyring(NEW)

    class Kms:
        async def encrypt(self, plaintext: bytes) -> bytes:
            await asyncio.sleep(0)
            return ring.encrypt(plaintext)

        async def decrypt(self, ciphertext: bytes) -> bytes:
            await asyncio.sleep(0)
            return ring.decrypt(ciphertext)

    with SyncClient(url, encryption=Kms()) as producer:
        info = producer.enqueue("enc:kms", b"raw-bytes", queue="enc-kms", retention=600)
        tx = producer.enqueue_tx([TaskSpec("enc:kms", b"tx-bytes", queue="enc-kms", retention=600)])
        spec_ids = [t.id for t in tx]
    seen: list[bytes] = []
    reg = Registry()

    @reg.handler("enc:kms")
    async def handle(task: TaskData, ctx: TaskContext) -> None:
        seen.append(task.payload)

    async def main() -> None:
        async with Client(url) as client, running(reg, url, "enc-kms", encryption=Kms()):
            for task_id in (info.id, *spec_ids):
                await settled(client, task_id, TaskState.COMPLETED)

    asyncio.run(main())
    assert sorted(seen) == [b"raw-bytes", b"tx-bytes"]


def test_batch_members_that_cannot_be_opened_are_answered_alone(url: str) -> None:
    """In a group batch, an unopenable member fails by itself; the handler gets the others, opened."""
    reg = Registry()
    calls: list[list[bytes]] = []

    @reg.batch_handler("enc:agg")
    async def agg(tasks: list[TaskData], ctx: TaskContext) -> None:
        calls.append([t.payload for t in tasks])
        assert all(MARKER_KEY not in t.metadata for t in tasks)

    async def main() -> list[TaskInfo]:
        keep: dict[str, Any] = {"group": "g-enc", "queue": "enc-agg", "retention": 600, "max_retry": 1}
        keep["retry_policy"] = FAST_RETRY
        async with Client(url, encryption=Keyring(NEW)) as new, Client(url, encryption=Keyring(OLD)) as old:
            first = await new.enqueue("enc:agg", b"one", **keep)
            stray = await old.enqueue("enc:agg", b"two", **keep)
        async with Client(url) as plain:
            third = await plain.enqueue("enc:agg", b"three", **keep)
            async with running(reg, url, "enc-agg", encryption=Keyring(NEW)):
                done = [await settled(plain, t.id, TaskState.COMPLETED) for t in (first, third)]
                failed = await settled(plain, stray.id, TaskState.ARCHIVED)
        return [*done, failed]

    *_, failed = asyncio.run(main())
    assert calls == [[b"one", b"three"]]
    assert failed.id in failed.last_error and "2026-q2" in failed.last_error
