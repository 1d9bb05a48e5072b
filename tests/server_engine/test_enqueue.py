"""TaskService in-process: Enqueue validation, defaults, idempotency, uniqueness, batch, tx, GetTask."""

from __future__ import annotations

import asyncio

import pytest
from google.protobuf import duration_pb2, timestamp_pb2

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Code
from conveyor_server_min._engine.clock import NANOS
from tests.server_engine._harness import call, call_error, enqueue, get, make

S = tpb.TaskState


def _dur(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def _ts(seconds: float) -> timestamp_pb2.Timestamp:
    t = timestamp_pb2.Timestamp()
    t.FromNanoseconds(int(seconds * 1e9))
    return t


INVALID = [
    (dict(type=""), "task type is required"),
    (dict(queue="bad queue"), 'invalid queue name "bad queue"'),
    (dict(queue="-x"), 'invalid queue name "-x"'),
    (dict(process_at=_ts(1), process_in=_dur(1)), "process_at and process_in are mutually exclusive"),
    (dict(expires_at=_ts(1), expires_in=_dur(1)), "expires_at and expires_in are mutually exclusive"),
    (dict(group="g", process_in=_dur(1)), "group and process_at/process_in are mutually exclusive"),
    (dict(group="g", concurrency_key="k"), "group and concurrency_key are mutually exclusive"),
    (dict(max_retry=-1), "max_retry must not be negative, got -1"),
    (dict(priority=10), "priority must be in 0..9, got 10"),
    (dict(priority=-1), "priority must be in 0..9, got -1"),
    (dict(depends_on=[tpb.TaskDependency(task_id="")]), "a dependency must name a task id"),
    (
        dict(depends_on=[tpb.TaskDependency(task_id=f"d{i}") for i in range(1001)]),
        "a task may depend on at most 1000 tasks, got 1001",
    ),
]


@pytest.mark.parametrize(("fields", "message"), INVALID)
def test_enqueue_rejects_invalid_requests_with_upstream_messages(fields: dict, message: str) -> None:
    """Each invalid Enqueue fails with invalid_argument and the upstream message."""

    async def main() -> None:
        services, _ = make()
        fields.setdefault("type", "t")
        err = await call_error(services, "Enqueue", pb.EnqueueRequest(**fields))
        assert err.code is Code.INVALID_ARGUMENT
        assert err.message == message

    asyncio.run(main())


def test_validation_order_reports_the_first_failing_rule() -> None:
    """With several problems, the earliest rule in the upstream order is reported."""

    async def main() -> None:
        services, _ = make()
        req = pb.EnqueueRequest(type="", queue="bad queue", priority=42, max_retry=-3)
        assert (await call_error(services, "Enqueue", req)).message == "task type is required"
        req = pb.EnqueueRequest(type="t", priority=42, max_retry=-3)
        err = await call_error(services, "Enqueue", req)
        assert err.message == "max_retry must not be negative, got -3"

    asyncio.run(main())


def test_payload_limit_is_one_mebibyte() -> None:
    """A 1 MiB payload is accepted; one byte more is rejected naming its size."""

    async def main() -> None:
        services, _ = make()
        ok = await enqueue(services, payload=b"x" * (1 << 20))
        assert len(ok.payload) == 1 << 20
        big = pb.EnqueueRequest(type="t", payload=b"x" * ((1 << 20) + 1))
        err = await call_error(services, "Enqueue", big)
        assert err.code is Code.INVALID_ARGUMENT
        assert err.message.startswith("payload is 1048577 bytes, the maximum is 1048576")

    asyncio.run(main())


def test_defaults_are_applied() -> None:
    """Empty queue -> default, priority 0 -> 4, max_retry 0 -> 25, server ULID id, PENDING."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services, payload=b"{}", content_type="application/json")
        assert info.queue == "default"
        assert info.priority == 4
        assert info.max_retry == 25
        assert len(info.id) == 26
        assert info.state == S.TASK_STATE_PENDING
        assert info.enqueued_at.ToNanoseconds() == clock.now()
        assert not info.HasField("process_at")
        assert info.content_type == "application/json"

    asyncio.run(main())


def test_server_ids_sort_by_creation() -> None:
    """Server-assigned ids are strictly increasing ULIDs, even within one millisecond."""

    async def main() -> None:
        services, _ = make()
        ids = [(await enqueue(services)).id for _ in range(50)]
        assert ids == sorted(ids)
        assert len(set(ids)) == 50

    asyncio.run(main())


def test_repeat_task_id_is_already_exists() -> None:
    """Enqueue with an existing task_id fails already_exists and leaves the stored task untouched."""

    async def main() -> None:
        services, _ = make()
        first = await enqueue(services, task_id="job-1", type="a")
        err = await call_error(services, "Enqueue", pb.EnqueueRequest(task_id="job-1", type="b"))
        assert err.code is Code.ALREADY_EXISTS
        assert (await get(services, "job-1")).type == first.type == "a"

    asyncio.run(main())


def test_unique_key_is_global_and_freed_when_complete_or_lapsed() -> None:
    """A held unique_key conflicts across queues; a lapsed unique_ttl or a terminal holder frees it."""

    async def main() -> None:
        services, clock = make()
        await enqueue(services, unique_key="k", queue="a", unique_ttl=_dur(10))
        err = await call_error(services, "Enqueue", pb.EnqueueRequest(type="t", queue="b", unique_key="k"))
        assert err.code is Code.ALREADY_EXISTS
        clock.advance(10)
        second = await enqueue(services, unique_key="k", queue="b")
        assert second.queue == "b"
        await call(services, "CancelTask", pb.CancelTaskRequest(id=second.id))
        third = await enqueue(services, unique_key="k")
        assert third.state == S.TASK_STATE_PENDING

    asyncio.run(main())


def test_priority_process_in_and_expires_in_resolve_at_enqueue() -> None:
    """Priority kept; process_in -> SCHEDULED at now + delay; a past process_at -> PENDING."""

    async def main() -> None:
        services, clock = make()
        now = clock.now()
        hi = await enqueue(services, priority=9)
        assert hi.priority == 9
        later = await enqueue(services, process_in=_dur(30))
        assert later.state == S.TASK_STATE_SCHEDULED
        assert later.process_at.ToNanoseconds() == now + 30 * NANOS
        past = await enqueue(services, process_at=_ts(now / NANOS - 5))
        assert past.state == S.TASK_STATE_PENDING

    asyncio.run(main())


def test_enqueue_batch_items_fail_independently() -> None:
    """EnqueueBatch returns a task or an error per item, in order; bounds are 1..1000."""

    async def main() -> None:
        services, _ = make()
        req = pb.EnqueueBatchRequest(
            tasks=[
                pb.EnqueueRequest(type="a", task_id="x1"),
                pb.EnqueueRequest(type=""),
                pb.EnqueueRequest(type="b", task_id="x1"),
                pb.EnqueueRequest(type="c", unique_key="u"),
                pb.EnqueueRequest(type="d", unique_key="u"),
            ]
        )
        resp = await call(services, "EnqueueBatch", req)
        assert [r.task.type if r.HasField("task") else r.error for r in resp.results] == [
            "a",
            "task type is required",
            "task x1 already exists",
            "c",
            "broker: duplicate task",
        ]
        empty = await call_error(services, "EnqueueBatch", pb.EnqueueBatchRequest())
        assert (empty.code, empty.message) == (Code.INVALID_ARGUMENT, "batch must contain at least one task")
        big = pb.EnqueueBatchRequest(tasks=[pb.EnqueueRequest(type="t")] * 1001)
        err = await call_error(services, "EnqueueBatch", big)
        assert err.message == "batch holds 1001 tasks, the maximum is 1000; split it into smaller batches"
        full = pb.EnqueueBatchRequest(tasks=[pb.EnqueueRequest(type="t")] * 1000)
        ok = await call(services, "EnqueueBatch", full)
        assert len(ok.results) == 1000

    asyncio.run(main())


def test_enqueue_tx_is_atomic() -> None:
    """EnqueueTx: a validation error names the item and commits nothing; a unique clash commits nothing."""

    async def main() -> None:
        services, _ = make()
        items = [pb.EnqueueRequest(type="a", task_id="t1"), pb.EnqueueRequest(type="")]
        bad = pb.EnqueueTxRequest(tasks=items)
        err = await call_error(services, "EnqueueTx", bad)
        assert (err.code, err.message) == (Code.INVALID_ARGUMENT, "task 1: task type is required")
        clash = pb.EnqueueTxRequest(
            tasks=[
                pb.EnqueueRequest(type="a", task_id="t1", unique_key="u"),
                pb.EnqueueRequest(type="a", task_id="t2", unique_key="u"),
            ]
        )
        assert (await call_error(services, "EnqueueTx", clash)).code is Code.ALREADY_EXISTS
        for task_id in ("t1", "t2"):
            missing = await call_error(services, "GetTask", pb.GetTaskRequest(id=task_id))
            assert missing.code is Code.NOT_FOUND

    asyncio.run(main())


def test_enqueue_tx_existing_ids_are_noops_and_order_is_kept() -> None:
    """Re-committing an existing id does not abort EnqueueTx; tasks come back in request order."""

    async def main() -> None:
        services, _ = make()
        await enqueue(services, task_id="old", type="orig")
        req = pb.EnqueueTxRequest(
            tasks=[
                pb.EnqueueRequest(type="n1", task_id="new1"),
                pb.EnqueueRequest(type="other", task_id="old"),
                pb.EnqueueRequest(type="n2", task_id="new2"),
                pb.EnqueueRequest(type="dup", task_id="new1"),
            ]
        )
        resp = await call(services, "EnqueueTx", req)
        assert [(t.id, t.type) for t in resp.tasks] == [
            ("new1", "n1"),
            ("old", "orig"),
            ("new2", "n2"),
            ("new1", "n1"),
        ]
        unique_held = pb.EnqueueTxRequest(tasks=[pb.EnqueueRequest(type="t", unique_key="k")])
        await call(services, "EnqueueTx", unique_held)
        assert (await call_error(services, "EnqueueTx", unique_held)).code is Code.ALREADY_EXISTS

    asyncio.run(main())


def test_get_task_errors() -> None:
    """GetTask: empty id -> invalid_argument; unknown id -> not_found."""

    async def main() -> None:
        services, _ = make()
        empty = await call_error(services, "GetTask", pb.GetTaskRequest())
        assert (empty.code, empty.message) == (Code.INVALID_ARGUMENT, "task id is required")
        unknown = await call_error(services, "GetTask", pb.GetTaskRequest(id="nope"))
        assert (unknown.code, unknown.message) == (Code.NOT_FOUND, "broker: task not found")

    asyncio.run(main())
