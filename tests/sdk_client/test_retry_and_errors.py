"""Retry policy (only safe calls, only unavailable), timeouts, cancellation and error translation.

A real server cannot be told to flap, so these tests host connectrpc's own
ASGI/WSGI apps in-process through pyqwest's testing transports.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from connectrpc.code import Code as CCode
from connectrpc.errors import ConnectError
from pyqwest.testing import ASGITransport, WSGITransport

from conveyor_sdk._client.retry import RetryConfig, safe_to_repeat
from conveyor_sdk._client.transport import translate
from conveyor_sdk._gen.conveyor.v1 import service_connect as sc
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.client import Client, SyncClient, task
from conveyor_sdk.errors import (
    Code,
    DeadlineExceeded,
    DuplicateTask,
    NotFound,
    Unauthenticated,
    Unavailable,
)

FAST = RetryConfig(attempts=4, base=0.001, max_delay=0.005)


class Flaky:
    """Fails the first ``failures`` calls of every method with ``code``, then answers."""

    def __init__(self, failures: int, code: CCode = CCode.UNAVAILABLE) -> None:
        self.failures = failures
        self.code = code
        self.calls: list[str] = []
        self.headers: list[dict[str, str]] = []

    def _maybe_fail(self, name: str, ctx: object) -> None:
        self.calls.append(name)
        self.headers.append(dict(ctx.request_headers.items()))  # type: ignore[attr-defined]
        if len(self.calls) <= self.failures:
            raise ConnectError(self.code, f"flap {len(self.calls)}")

    def _info(self, req: pb.EnqueueRequest) -> pb.TaskInfo:
        return pb.TaskInfo(id=req.task_id or "srv-id", type=req.type, queue=req.queue or "default", state=2)


class AsyncFlaky(Flaky):
    async def enqueue(self, req: pb.EnqueueRequest, ctx: object) -> pb.EnqueueResponse:
        self._maybe_fail("Enqueue", ctx)
        return pb.EnqueueResponse(task=self._info(req))

    async def enqueue_batch(self, req: pb.EnqueueBatchRequest, ctx: object) -> pb.EnqueueBatchResponse:
        self._maybe_fail("EnqueueBatch", ctx)
        return pb.EnqueueBatchResponse(results=[pb.EnqueueResult(task=self._info(r)) for r in req.tasks])

    async def enqueue_tx(self, req: pb.EnqueueTxRequest, ctx: object) -> pb.EnqueueTxResponse:
        self._maybe_fail("EnqueueTx", ctx)
        return pb.EnqueueTxResponse(tasks=[self._info(r) for r in req.tasks])

    async def get_task(self, req: pb.GetTaskRequest, ctx: object) -> pb.GetTaskResponse:
        self._maybe_fail("GetTask", ctx)
        return pb.GetTaskResponse(task=pb.TaskInfo(id=req.id, state=5))


class SyncFlaky(Flaky):
    def enqueue(self, req: pb.EnqueueRequest, ctx: object) -> pb.EnqueueResponse:
        self._maybe_fail("Enqueue", ctx)
        return pb.EnqueueResponse(task=self._info(req))

    def get_task(self, req: pb.GetTaskRequest, ctx: object) -> pb.GetTaskResponse:
        self._maybe_fail("GetTask", ctx)
        return pb.GetTaskResponse(task=pb.TaskInfo(id=req.id, state=5))

    def enqueue_batch(self, req: pb.EnqueueBatchRequest, ctx: object) -> pb.EnqueueBatchResponse:
        raise NotImplementedError

    def enqueue_tx(self, req: pb.EnqueueTxRequest, ctx: object) -> pb.EnqueueTxResponse:
        raise NotImplementedError


def _client(service: AsyncFlaky, **kw: object) -> Client:
    transport = ASGITransport(sc.TaskServiceASGIApplication(service))
    kw.setdefault("retry", FAST)
    return Client("http://test", transport=transport, **kw)  # type: ignore[arg-type]


def test_safe_to_repeat_rules() -> None:
    """GetTask always; Enqueue only with task_id; EnqueueTx and EnqueueBatch only when every item has one."""
    assert safe_to_repeat("GetTask", pb.GetTaskRequest(id="x"))
    assert safe_to_repeat("Enqueue", pb.EnqueueRequest(type="t", task_id="a"))
    assert not safe_to_repeat("Enqueue", pb.EnqueueRequest(type="t"))
    both = pb.EnqueueTxRequest(tasks=[pb.EnqueueRequest(task_id="a"), pb.EnqueueRequest(task_id="b")])
    one = pb.EnqueueTxRequest(tasks=[pb.EnqueueRequest(task_id="a"), pb.EnqueueRequest()])
    assert safe_to_repeat("EnqueueTx", both) and not safe_to_repeat("EnqueueTx", one)
    assert safe_to_repeat("EnqueueBatch", pb.EnqueueBatchRequest(tasks=[pb.EnqueueRequest(task_id="a")]))
    assert not safe_to_repeat("EnqueueBatch", pb.EnqueueBatchRequest(tasks=[pb.EnqueueRequest()]))
    assert not safe_to_repeat("CancelTask", pb.CancelTaskRequest(id="a"))


def test_full_jitter_delay_bounds() -> None:
    """Delay n is uniform in [0, min(max, base*2^n)); rand=1 hits the ceiling."""
    cfg = RetryConfig(attempts=5, base=0.5, max_delay=3.0)
    assert [cfg.delay(n, lambda: 1.0) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    rng = random.Random(1)
    assert all(0 <= cfg.delay(3, rng.random) < 3.0 for _ in range(200))
    with pytest.raises(ValueError, match="attempts"):
        RetryConfig(attempts=0)


def test_safe_calls_are_retried_through_a_flapping_server() -> None:
    """GetTask and Enqueue-with-id survive two unavailable answers; headers carry the bearer token."""

    async def main() -> None:
        service = AsyncFlaky(failures=2)
        async with _client(service, token="s3cret") as client:
            info = await client.get_task("abc")
            assert info.id == "abc" and service.calls == ["GetTask"] * 3
            service.calls.clear()
            info = await client.enqueue("t", {"a": 1}, task_id="id-1")
            assert info.id == "id-1" and service.calls == ["Enqueue"] * 3
            assert client.statistics()["retries"] == 4
        assert all(h.get("authorization") == "Bearer s3cret" for h in service.headers)

    asyncio.run(main())


def test_enqueues_without_ids_get_ids_and_are_retried() -> None:
    """Enqueue, EnqueueBatch and EnqueueTx without task_id get ULIDs, so unavailable is retried."""

    async def main() -> None:
        service = AsyncFlaky(failures=1)
        async with _client(service) as client:
            results = await client.enqueue_batch([task("t", None), task("t", None, task_id="x")])
            assert service.calls == ["EnqueueBatch"] * 2 and all(r.ok for r in results)
            assert len(results[0].task.id) == 26 and results[1].task.id == "x"  # type: ignore[union-attr]
            service.failures = 4  # counts every call so far: the two batch attempts, then Enqueue
            info2 = await client.enqueue("t", None)
            assert len(info2.id) == 26 and service.calls == ["EnqueueBatch"] * 2 + ["Enqueue"] * 3
            service.failures = 6
            tx = await client.enqueue_tx([task("a", None), task("b", None)])
            assert len({t.id for t in tx}) == 2 and all(len(t.id) == 26 for t in tx)
            assert service.calls[-2:] == ["EnqueueTx"] * 2

    asyncio.run(main())


def test_tx_retry_needs_every_task_id_and_budget_is_bounded() -> None:
    """EnqueueTx with ids retries; a server that keeps failing exhausts the 4-attempt budget."""

    async def main() -> None:
        service = AsyncFlaky(failures=2)
        async with _client(service) as client:
            tasks = await client.enqueue_tx([task("a", 1, task_id="1"), task("b", 2, task_id="2")])
            assert [t.id for t in tasks] == ["1", "2"] and len(service.calls) == 3
            service.calls.clear()
            service.failures = 100
            with pytest.raises(Unavailable):
                await client.get_task("x")
            assert len(service.calls) == FAST.attempts

    asyncio.run(main())


def test_non_unavailable_errors_are_translated_not_retried() -> None:
    """not_found / already_exists / unauthenticated map to their SDK classes at once."""

    async def main() -> None:
        for code, cls in [
            (CCode.NOT_FOUND, NotFound),
            (CCode.ALREADY_EXISTS, DuplicateTask),
            (CCode.UNAUTHENTICATED, Unauthenticated),
        ]:
            service = AsyncFlaky(failures=1, code=code)
            async with _client(service) as client:
                with pytest.raises(cls) as info:
                    await client.get_task("x")
                assert not info.value.retryable and service.calls == ["GetTask"]

    asyncio.run(main())


class Hanging(AsyncFlaky):
    def __init__(self) -> None:
        super().__init__(0)
        self.entered = asyncio.Event()

    async def get_task(self, req: pb.GetTaskRequest, ctx: object) -> pb.GetTaskResponse:
        self.entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_timeout_and_cancellation() -> None:
    """rpc_timeout raises DeadlineExceeded; cancelling the caller's task raises CancelledError."""

    async def main() -> None:
        service = Hanging()
        async with _client(service, retry=RetryConfig(attempts=1)) as client:
            with pytest.raises(DeadlineExceeded):
                await client.get_task("x", rpc_timeout=0.05)
            service.entered.clear()
            call = asyncio.ensure_future(client.get_task("y"))
            await asyncio.wait_for(service.entered.wait(), 10)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

    asyncio.run(main())


def test_sync_client_retries_too() -> None:
    """SyncClient applies the same retry rules."""
    service = SyncFlaky(failures=2)
    transport = WSGITransport(sc.TaskServiceWSGIApplication(service))
    with SyncClient("http://test", transport=transport, retry=FAST) as client:
        assert client.get_task("abc").id == "abc"
        assert service.calls == ["GetTask"] * 3
        service.calls.clear()
        service.failures = 2
        assert len(client.enqueue("t", None).id) == 26  # a client-assigned id: safe to retry
        assert service.calls == ["Enqueue"] * 3


def test_translate_maps_foreign_exceptions() -> None:
    """ConnectError codes, timeouts and OS errors all become ConveyorError subclasses."""
    assert isinstance(translate(ConnectError(CCode.NOT_FOUND, "gone")), NotFound)
    err = translate(ConnectError(CCode.DATA_LOSS, "oops"))
    assert err.code is Code.DATA_LOSS and err.message == "oops"
    assert isinstance(translate(TimeoutError()), DeadlineExceeded)
    assert isinstance(translate(ConnectionRefusedError("refused")), Unavailable)
    assert isinstance(translate(RuntimeError("h2 blew up")), Unavailable)


def test_bad_addresses_and_options() -> None:
    """Client construction validates the URL scheme and options."""
    with pytest.raises(ValueError, match="http:// or https://"):
        Client("localhost:8080")
    with pytest.raises(ValueError, match="protocol"):
        SyncClient("http://x", protocol="grpc-web")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown client option"):
        SyncClient("http://x", tokn="a")  # type: ignore[call-arg]


class LostAnswer(AsyncFlaky):
    """Commits the first Enqueue but answers unavailable; repeats are already_exists."""

    def __init__(self, stored_type: str | None = None) -> None:
        super().__init__(0)
        self.stored: dict[str, pb.TaskInfo] = {}
        self.stored_type = stored_type

    async def enqueue(self, req: pb.EnqueueRequest, ctx: object) -> pb.EnqueueResponse:
        self.calls.append("Enqueue")
        if req.task_id in self.stored:
            raise ConnectError(CCode.ALREADY_EXISTS, "duplicate task")
        info = self._info(req)
        if self.stored_type:
            info.type = self.stored_type
        self.stored[req.task_id] = info
        raise ConnectError(CCode.UNAVAILABLE, "connection lost after commit")

    async def get_task(self, req: pb.GetTaskRequest, ctx: object) -> pb.GetTaskResponse:
        self.calls.append("GetTask")
        return pb.GetTaskResponse(task=self.stored[req.id])


def test_duplicate_after_retry_reads_back_our_own_task() -> None:
    """Enqueue(task_id) whose answer was lost returns the stored task instead of DuplicateTask."""

    async def main() -> None:
        service = LostAnswer()
        async with _client(service) as client:
            info = await client.enqueue("t", {"a": 1}, task_id="mine")
            assert info.id == "mine" and service.calls == ["Enqueue", "Enqueue", "GetTask"]
            service.calls.clear()
            with pytest.raises(DuplicateTask):  # a first-attempt duplicate is a real duplicate
                await client.enqueue("t", {"a": 1}, task_id="mine")
            assert service.calls == ["Enqueue"]
        other = LostAnswer(stored_type="someone-else")
        async with _client(other) as client:
            with pytest.raises(DuplicateTask):  # stored task is not ours: keep the error
                await client.enqueue("t", None, task_id="theirs")

    asyncio.run(main())


def test_deadline_reaches_the_server() -> None:
    """The call's deadline travels as connect-timeout-ms: the client default, or rpc_timeout."""

    async def main() -> None:
        service = AsyncFlaky(failures=0)
        async with _client(service, timeout=7.5) as client:
            await client.get_task("a")
            await client.get_task("b", rpc_timeout=0.25)
        async with _client(service, timeout=None) as client:
            await client.get_task("c")
        sent = [h.get("connect-timeout-ms") for h in service.headers]
        assert sent == ["7500", "250", None]

    asyncio.run(main())
