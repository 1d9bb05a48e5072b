"""String size limits: every stored string field is bounded, named in the error, and never echoed back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Code
from conveyor_server_min._services.bounds import (
    MAX_HELLO_BATCH_TYPES,
    MAX_HELLO_QUEUES,
    MAX_KEY,
    MAX_METADATA_ENTRIES,
    MAX_METADATA_KEY,
    MAX_METADATA_TOTAL,
    MAX_METADATA_VALUE,
    MAX_NAME,
    MAX_TEXT,
)
from tests.server_engine._harness import Worker, call, call_error, enqueue, get, make

OUTCOME = pb.TaskOutcome


def _big_map(entries: int, value: int) -> dict[str, str]:
    return {f"k{i}": "v" * value for i in range(entries)}


CASES = [
    ({"type": "t" * (MAX_NAME + 1)}, f"task type is {MAX_NAME + 1} bytes, the maximum is {MAX_NAME}"),
    ({"type": "\u00e9" * 128}, f"task type is 256 bytes, the maximum is {MAX_NAME}"),  # 2 bytes each
    ({"type": "t" * (4 << 20)}, f"task type is {4 << 20} bytes, the maximum is {MAX_NAME}"),
    ({"queue": "q" * (MAX_NAME + 1)}, f"queue name is {MAX_NAME + 1} bytes"),
    ({"task_id": "i" * (MAX_NAME + 1)}, f"task_id is {MAX_NAME + 1} bytes"),
    ({"unique_key": "u" * (MAX_KEY + 1)}, f"unique_key is {MAX_KEY + 1} bytes"),
    ({"group": "g" * (MAX_NAME + 1)}, f"group is {MAX_NAME + 1} bytes"),
    ({"concurrency_key": "c" * (MAX_NAME + 1)}, f"concurrency_key is {MAX_NAME + 1} bytes"),
    ({"content_type": "x" * (MAX_NAME + 1)}, f"content_type is {MAX_NAME + 1} bytes"),
    ({"depends_on": [{"task_id": "d" * (MAX_NAME + 1)}]}, f"depends_on[0].task_id is {MAX_NAME + 1} bytes"),
    ({"metadata": _big_map(MAX_METADATA_ENTRIES + 1, 1)}, f"metadata has {MAX_METADATA_ENTRIES + 1} entries"),
    ({"metadata": {"k" * (MAX_METADATA_KEY + 1): "v"}}, f"metadata key is {MAX_METADATA_KEY + 1} bytes"),
    ({"metadata": {"k": "v" * (MAX_METADATA_VALUE + 1)}}, "metadata value for key 'k' is"),
    ({"metadata": _big_map(9, MAX_METADATA_VALUE)}, f"metadata totals {9 * MAX_METADATA_VALUE + 18} bytes"),
]


@pytest.mark.parametrize(("fields", "message"), CASES)
def test_oversized_enqueue_strings_are_refused(fields: dict[str, Any], message: str) -> None:
    """Each bounded field over its limit is invalid_argument with a short message naming it; nothing is
    stored; the same request one byte shorter (where it applies) is accepted."""

    async def main() -> None:
        services, _ = make()
        req = pb.EnqueueRequest(**{"type": "t", **fields})
        err = await call_error(services, "Enqueue", req)
        assert err.code is Code.INVALID_ARGUMENT
        assert message in err.message, err.message
        assert len(err.message) < 200
        batch = await call(services, "EnqueueBatch", pb.EnqueueBatchRequest(tasks=[req]))
        assert message in batch.results[0].error
        tx = await call_error(services, "EnqueueTx", pb.EnqueueTxRequest(tasks=[req]))
        assert tx.message.startswith("task 0: ") and message in tx.message
        listed = await call(services, "ListTasks", pb.ListTasksRequest())
        assert not listed.tasks

    asyncio.run(main())


def test_strings_at_their_limits_are_accepted() -> None:
    """Every bounded field exactly at its limit is accepted and stored unchanged."""

    async def main() -> None:
        services, _ = make()
        meta = {f"k{i:0{MAX_METADATA_KEY - 1}d}": "v" * 700 for i in range(MAX_METADATA_ENTRIES)}
        assert sum(len(k) + len(v) for k, v in meta.items()) <= MAX_METADATA_TOTAL
        info = await enqueue(
            services,
            type="t" * MAX_NAME,
            queue="q" * MAX_NAME,
            task_id="i" * MAX_NAME,
            unique_key="u" * MAX_KEY,
            concurrency_key="c" * MAX_NAME,
            content_type="x" * MAX_NAME,
            depends_on=[{"task_id": "d" * MAX_NAME}],
            metadata={"big": "v" * MAX_METADATA_VALUE},
        )
        assert info.type == "t" * MAX_NAME and info.queue == "q" * MAX_NAME
        assert (await enqueue(services, metadata=meta)).id

    asyncio.run(main())


@pytest.mark.parametrize(
    ("hello", "message"),
    [
        ({"queues": {f"q{i}": 1 for i in range(MAX_HELLO_QUEUES + 1)}}, "Hello declares 10001 queues"),
        ({"queues": {"q" * (MAX_NAME + 1): 1}}, f"queue name is {MAX_NAME + 1} bytes"),
        ({"batch_types": ["b"] * (MAX_HELLO_BATCH_TYPES + 1)}, "Hello declares 1001 batch_types"),
        ({"batch_types": ["b" * (MAX_NAME + 1)]}, f"batch type is {MAX_NAME + 1} bytes"),
        ({"labels": {"k": "v" * (MAX_METADATA_VALUE + 1)}}, "labels value for key 'k' is"),
        ({"sdk_version": "v1.0.0-" + "a" * MAX_NAME}, "sdk_version is longer than 255 bytes"),
    ],
)
def test_oversized_hello_is_invalid_argument(hello: dict[str, Any], message: str) -> None:
    """A Hello over a bound ends the stream with invalid_argument before Welcome and registers nothing."""

    async def main() -> None:
        services, _ = make()
        w = Worker(services)
        w.start(**hello)
        exc = await w.ended()
        assert exc is not None and getattr(exc, "code", None) is Code.INVALID_ARGUMENT
        assert message in str(exc), str(exc)
        assert not w.sent and not services.engine.dispatcher.sessions

    asyncio.run(main())


def test_hello_at_the_queue_cap_is_served() -> None:
    """A Hello declaring exactly MAX_HELLO_QUEUES queues gets Welcome and its tasks."""

    async def main() -> None:
        services, _ = make()
        info = await enqueue(services, queue="q9999")
        w = Worker(services)
        await w.open(queues={f"q{i}": 1 for i in range(MAX_HELLO_QUEUES)})
        assert (await w.dispatch()).task.id == info.id
        await w.close()

    asyncio.run(main())


def test_operator_strings_are_bounded() -> None:
    """Admin task ids, group-config groups and cron ids over 255 bytes are invalid_argument."""

    async def main() -> None:
        services, _ = make()
        long = "x" * (MAX_NAME + 1)
        for path, req in [
            ("CancelTask", pb.CancelTaskRequest(id=long)),
            ("RescheduleTask", pb.RescheduleTaskRequest(id=long, process_in={"seconds": 1})),
            ("SetGroupConfig", pb.SetGroupConfigRequest(
                queue="q", group=long, max_size=1, max_delay={"seconds": 1}, grace_period={"seconds": 1})),
            ("UpsertCron", pb.UpsertCronRequest(entry=pb.CronEntry(id=long, spec="@hourly", task_type="t"))),
            ("UpsertCron", pb.UpsertCronRequest(entry=pb.CronEntry(id="c", spec="@hourly" + " " * 249,
                                                                   task_type="t"))),
            ("UpsertCron", pb.UpsertCronRequest(entry=pb.CronEntry(
                id="c", spec="@hourly", task_type="t", options=tpb.TaskOptions(concurrency_key=long)))),
            ("PauseQueue", pb.PauseQueueRequest(queue=long)),
        ]:  # fmt: skip
            err = await call_error(services, path, req)
            assert err.code is Code.INVALID_ARGUMENT, (path, err)
            assert f"is {MAX_NAME + 1} bytes" in err.message, (path, err)
        batch = await call(services, "BatchDeleteTasks", pb.BatchTasksRequest(ids=[long]))
        assert f"is {MAX_NAME + 1} bytes" in batch.results[0].error

    asyncio.run(main())


def test_worker_free_text_is_truncated_not_refused() -> None:
    """A 100 KB Result.error_msg and Progress.message are stored cut to MAX_TEXT bytes and marked."""

    async def main() -> None:
        services, _ = make()
        info = await enqueue(services, max_retry=3)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        w.send(progress=pb.Progress(task_id=info.id, percent=5, message="p" * 100_000))
        await w.settle()
        task = services.engine.get(info.id)
        assert task is not None and len(task.progress_message) == MAX_TEXT
        w.result(info.id, OUTCOME.TASK_OUTCOME_RETRY, "\u00e9" * 50_000)
        await w.settle()
        error = (await get(services, info.id)).last_error
        assert len(error.encode()) <= MAX_TEXT and error.endswith(" [truncated]")
        assert error.startswith("\u00e9" * 100)
        await w.close()

    asyncio.run(main())
