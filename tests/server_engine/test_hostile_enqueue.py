"""Hostile Enqueue options: out-of-range times are invalid_argument with nothing committed, nothing ever
answers internal, and one unencodable task cannot end a session or fail a listing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Code, ConveyorError
from conveyor_server_min._engine.model import Task
from conveyor_server_min._services.convert import UNENCODABLE
from conveyor_server_min._services.session import UNDELIVERABLE
from tests.server_engine._harness import Worker, call, call_error, get, make

S = tpb.TaskState
MAX_D = 315_576_000_000  # the largest valid Duration, in seconds


async def _count(services: Any) -> int:
    return len((await call(services, "ListTasks", pb.ListTasksRequest(limit=1000))).tasks)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"expires_in": {"seconds": MAX_D}}, "expires_in"),
        ({"expires_in": {"seconds": -MAX_D}}, "expires_in"),
        ({"process_in": {"seconds": MAX_D}}, "process_in"),
        ({"process_in": {"seconds": -MAX_D}}, "process_in"),
        ({"timeout": {"seconds": MAX_D}}, "timeout"),
        ({"timeout": {"seconds": -MAX_D}}, "timeout"),
        ({"retention": {"seconds": MAX_D}}, "retention"),
        ({"unique_key": "u", "unique_ttl": {"seconds": MAX_D}}, "unique_ttl"),
        ({"process_at": {"seconds": 253_402_300_800}}, "process_at"),
        ({"deadline": {"seconds": -62_135_596_801}}, "deadline"),
        ({"expires_at": {"seconds": 1, "nanos": -1}}, "expires_at"),
        ({"timeout": {"seconds": 1, "nanos": -1}}, "timeout"),
        ({"process_in": {"seconds": MAX_D + 1}}, "process_in"),
        ({"retry_policy": {"base": {"seconds": -MAX_D - 1}}}, "retry_policy.base"),
    ],
)
def test_out_of_range_times_are_invalid_argument_and_commit_nothing(
    fields: dict[str, Any], named: str
) -> None:
    """Every time option whose value or resulting instant leaves the Timestamp range is refused, naming
    the field, by Enqueue, EnqueueBatch (per item) and EnqueueTx; no task is stored."""

    async def main() -> None:
        services, _ = make()
        req = pb.EnqueueRequest(type="t", **fields)
        err = await call_error(services, "Enqueue", req)
        assert err.code is Code.INVALID_ARGUMENT and err.message.startswith(named), err.message
        batch = await call(services, "EnqueueBatch", pb.EnqueueBatchRequest(tasks=[req]))
        assert batch.results[0].error.startswith(named)
        good = pb.EnqueueRequest(type="t")
        err = await call_error(services, "EnqueueTx", pb.EnqueueTxRequest(tasks=[good, req]))
        assert err.code is Code.INVALID_ARGUMENT and err.message.startswith(f"task 1: {named}"), err.message
        assert await _count(services) == 0

    asyncio.run(main())


@st.composite
def _time(draw: st.DrawFn) -> dict[str, int]:
    """Mostly well-formed values near the Duration / Timestamp limits, sometimes malformed ones."""
    edges = [0, MAX_D, -MAX_D, 253_402_300_799, -62_135_596_800, 2**63 - 1, -(2**63)]
    near = st.sampled_from(edges).flatmap(lambda e: st.integers(e - 2, e + 2))
    pick = draw(st.integers(0, 9))
    if pick < 6:
        seconds = draw(near)
    elif pick < 8:
        seconds = draw(st.integers(-(10**6), 10**6))
    else:
        seconds = draw(st.integers(-(2**63), 2**63 - 1))
    seconds = max(-(2**63), min(2**63 - 1, seconds))
    if draw(st.integers(0, 9)) < 8:  # nanos of the same sign as seconds: a valid Duration shape
        nanos = draw(st.integers(0, 999_999_999)) * (-1 if seconds < 0 else 1)
    else:
        nanos = draw(st.integers(-(2**31), 2**31 - 1))
    return {"seconds": seconds, "nanos": nanos}


TIME = _time()
TIME_FIELDS = ("timeout", "deadline", "process_at", "process_in", "expires_at", "expires_in", "unique_ttl",
               "retention")  # fmt: skip
OTHER = st.fixed_dictionaries(
    {"type": st.sampled_from(["t", "b"]), "queue": st.sampled_from(["", "q", "fuzz"])},
    optional={
        "priority": st.integers(-3, 12),
        "max_retry": st.integers(-2, 3),
        "unique_key": st.sampled_from(["", "k1", "k2"]),
        "group": st.sampled_from(["", "g"]),
        "concurrency_key": st.sampled_from(["", "c"]),
        "retry_policy": st.builds(lambda b, m, k: {"base": b, "max": m, "strategy": k},
                                  TIME, TIME, st.integers(0, 5)),
        "depends_on": st.lists(st.builds(lambda i, p: {"task_id": i, "on_failure": p},
                                         st.sampled_from(["", "x", "y"]), st.integers(0, 5)), max_size=2),
    },
)  # fmt: skip


@st.composite
def _request(draw: st.DrawFn) -> dict[str, Any]:
    """Other options plus one to three time options (more would nearly always fail on the first)."""
    fields = draw(OTHER)
    for name in draw(st.lists(st.sampled_from(TIME_FIELDS), min_size=1, max_size=3, unique=True)):
        fields[name] = draw(TIME)
    return fields


REQUEST = _request()


async def _never_internal(services: Any, path: str, req: Any) -> Any:
    try:
        return await call(services, path, req)
    except ConveyorError as exc:
        assert exc.code is not Code.INTERNAL, exc
        return None


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(REQUEST, min_size=1, max_size=4), st.sampled_from([0.0, 3.0, 10**10]))
def test_fuzzed_enqueue_options_never_answer_internal(requests: list[dict[str, Any]], later: float) -> None:
    """Enqueue, EnqueueBatch and EnqueueTx with random time and other options succeed or fail with a
    typed non-internal error; afterwards listings, a worker session and maintenance all still work."""

    async def main() -> None:
        services, clock = make()
        w = Worker(services)
        await w.open(queues={"default": 1, "q": 1, "fuzz": 1}, concurrency=3, batch_types=["b"])
        msgs = [pb.EnqueueRequest(**r) for r in requests]
        for msg in msgs:
            await _never_internal(services, "Enqueue", msg)
        await _never_internal(services, "EnqueueBatch", pb.EnqueueBatchRequest(tasks=msgs))
        await _never_internal(services, "EnqueueTx", pb.EnqueueTxRequest(tasks=msgs))
        clock.advance(later)
        engine = services.engine
        engine.reap()
        engine.promote()
        engine.sweep_groups()
        engine.wake_due()
        await w.settle()
        assert not w.task.done(), "the session ended"  # type: ignore[union-attr]
        for m in w.pending():
            assert m.WhichOneof("frame") in ("dispatch", "batch_dispatch", "cancel")
        await call(services, "ListTasks", pb.ListTasksRequest(limit=1000))
        await call(services, "ListQueues", pb.ListQueuesRequest())
        w2 = Worker(services)
        await w2.open(queues={"fuzz": 1, "q": 1})
        await w2.close()
        await w.close()

    asyncio.run(main())


def test_an_unencodable_task_is_archived_and_harms_no_other_task() -> None:
    """A stored task that cannot be encoded (priority beyond int32) is archived with a reason; the session
    survives and dispatches the next task; ListTasks and GetTask still answer."""

    async def main() -> None:
        services, _ = make()
        engine = services.engine
        engine.enqueue(Task(id="bad", queue="default", type="t", enqueued_at=0, priority=2**40))
        engine.enqueue(Task(id="good", queue="default", type="t", enqueued_at=0, priority=1))
        w = Worker(services)
        await w.open()
        d = await w.dispatch()
        assert d.task.id == "good"
        assert not w.task.done()  # type: ignore[union-attr]
        bad = engine.get("bad")
        assert bad is not None and bad.state.name == "ARCHIVED" and bad.last_error == UNDELIVERABLE
        listed = (await call(services, "ListTasks", pb.ListTasksRequest())).tasks
        assert {t.id for t in listed} == {"bad", "good"}
        stub = next(t for t in listed if t.id == "bad")
        assert stub.state == S.TASK_STATE_ARCHIVED and stub.last_error.startswith(UNENCODABLE)
        assert (await get(services, "bad")).last_error.startswith(UNENCODABLE)
        w.result("good")
        await w.close()

    asyncio.run(main())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    TIME,
    TIME,
    st.one_of(st.sampled_from([1e-300, 1e-9, 1.0, 1e300]), st.floats(min_value=1e-300, max_value=1e300)),
    st.sampled_from(["process_at", "process_in"]),
    st.sampled_from(["deadline", "expires_at", "timeout", "retention"]),
)
def test_fuzzed_admin_time_options_never_answer_internal(
    a: dict[str, int], b: dict[str, int], rate: float, when: str, option: str
) -> None:
    """RescheduleTask, SetGroupConfig, SetQueueRateLimit and UpsertCron with extreme times and rates
    answer OK or a typed non-internal error; dispatch, cron ticks and maintenance keep working."""

    async def main() -> None:
        services, clock = make()
        info = (await call(services, "Enqueue", pb.EnqueueRequest(type="t", group="g"))).task
        plain = (await call(services, "Enqueue", pb.EnqueueRequest(type="t", process_in={"seconds": 5}))).task
        await _never_internal(services, "RescheduleTask", pb.RescheduleTaskRequest(id=plain.id, **{when: a}))
        group = pb.SetGroupConfigRequest(queue="default", group="g", max_size=2, max_delay=a, grace_period=b)
        await _never_internal(services, "SetGroupConfig", group)
        limit = pb.SetQueueRateLimitRequest(queue="default", rate_per_sec=rate, burst=1)
        await _never_internal(services, "SetQueueRateLimit", limit)
        entry = pb.CronEntry(id="c", spec="@every 1s", task_type="t", options=tpb.TaskOptions(**{option: a}))
        await _never_internal(services, "UpsertCron", pb.UpsertCronRequest(entry=entry))
        w = Worker(services)
        await w.open(batch_types=["t"], concurrency=2)
        for step in (0.0, 2.0, 1e6):
            clock.advance(step)
            services.admin.cron.tick()
            services.engine.promote()
            services.engine.reap()
            services.engine.sweep_groups()
            services.engine.wake_due()
            await w.settle()
        assert not w.task.done(), "the session ended"  # type: ignore[union-attr]
        await call(services, "ListTasks", pb.ListTasksRequest(limit=1000))
        await call(services, "ListGroupConfigs", pb.ListGroupConfigsRequest())
        await call(services, "ListCron", pb.ListCronRequest())
        assert (await get(services, info.id)).id == info.id
        await w.close()

    asyncio.run(main())
