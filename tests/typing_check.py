"""Type-checked (mypy --strict), never executed: the public client/App API as users write it."""

from __future__ import annotations

from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, assert_type

import msgspec

from conveyor_sdk.app import App, TaskDefinition
from conveyor_sdk.client import Client, SyncClient, TaskSpec, task
from conveyor_sdk.codecs import CodecRegistry, JSONCodec
from conveyor_sdk.errors import ConveyorError, DuplicateTask
from conveyor_sdk.types import (
    Dependency,
    EnqueueResult,
    OnFailure,
    QueueInfo,
    RetryPolicy,
    RetryStrategy,
    TaskInfo,
    TaskPage,
    TaskState,
)
from conveyor_sdk.worker import TaskContext

app = App()


class Welcome(msgspec.Struct):
    user_id: int


@app.task("email:welcome", queue="emails", max_retry=5)
async def send_welcome(payload: Welcome, ctx: TaskContext) -> None:
    assert_type(payload, Welcome)


@app.batch_task("email:digest", queue="emails")
def digest(payloads: list[Welcome], ctx: TaskContext) -> int:
    return len(payloads)


assert_type(send_welcome, TaskDefinition[Welcome, Coroutine[Any, Any, None]])
assert_type(digest, TaskDefinition[Welcome, int])


async def producer(client: Client) -> None:
    info = await send_welcome.enqueue(client, Welcome(user_id=42), process_in=60)
    assert_type(info, TaskInfo)
    assert_type(info.state, TaskState)
    assert_type(info.enqueued_at, datetime | None)
    send_welcome.enqueue(client, {"user_id": 1})  # type: ignore[call-overload]
    send_welcome.enqueue(client, Welcome(user_id=1), priorty=3)  # type: ignore[call-overload]

    raw = await client.enqueue(
        "report:build",
        b"raw",
        content_type="application/octet-stream",
        task_id="r-1",
        queue="reports",
        metadata={"k": "v"},
        max_retry=3,
        timeout=timedelta(seconds=30),
        deadline=datetime.now(UTC) + timedelta(hours=1),
        unique_key="report",
        unique_ttl=600,
        priority=9,
        retention=timedelta(days=1),
        expires_in=3600,
        depends_on=["a", Dependency("b", on_failure=OnFailure.CONTINUE)],
        concurrency_key="tenant-1",
        retry_policy=RetryPolicy(strategy=RetryStrategy.FIXED, base=5, max=60),
        rpc_timeout=2.0,
    )
    assert_type(raw, TaskInfo)
    await client.enqueue("t", None, priority="high")  # type: ignore[arg-type]

    results = await client.enqueue_batch([task("a", {"x": 1}), send_welcome.spec(Welcome(user_id=2))])
    assert_type(results, list[EnqueueResult])
    committed = await client.enqueue_tx([TaskSpec("a", 1, task_id="1"), task("b", 2, task_id="2")])
    assert_type(committed, list[TaskInfo])

    page = await client.admin.list_tasks(queue="emails", state=TaskState.ARCHIVED, limit=10)
    assert_type(page, TaskPage)
    queues = await client.admin.list_queues()
    assert_type(queues, list[QueueInfo])
    await client.admin.reschedule_task("id", process_in=timedelta(minutes=5))
    await client.aclose()


def sync_producer() -> None:
    codecs = CodecRegistry.default()
    codecs.register(JSONCodec(html_escape=False))
    with SyncClient("http://localhost:8080", token="t", codecs=codecs, protocol="grpc") as client:
        info = send_welcome.enqueue(client, Welcome(user_id=7))
        assert_type(info, TaskInfo)
        got = client.get_task(info.id)
        assert_type(got.decode(Welcome), Welcome)
        try:
            client.enqueue("t", None, task_id="dup")
        except DuplicateTask as exc:
            assert_type(exc, DuplicateTask)
        except ConveyorError as exc:
            assert_type(exc.retryable, bool)
        client.admin.pause_queue("emails")
    SyncClient("http://x", wire_format="xml")  # type: ignore[arg-type]


def encrypted_setup() -> None:
    from collections.abc import Awaitable

    from conveyor_sdk.encryption import Encryptor, Key, Keyring, load_keyring
    from conveyor_sdk.worker import Worker

    ring = Keyring(Key.parse("k1:AAAA"), retired=[Key.generate("k0")])
    SyncClient("http://x", encryption=ring)
    App(encryption=ring)
    Worker("http://x", encryption=load_keyring())

    class Kms:
        async def encrypt(self, plaintext: bytes) -> bytes:
            return plaintext

        def decrypt(self, ciphertext: bytes) -> Awaitable[bytes]:
            return self.encrypt(ciphertext)

    kms: Encryptor = Kms()
    Client("http://x", encryption=kms)
    SyncClient("http://x", encryption="secret")  # type: ignore[arg-type]
