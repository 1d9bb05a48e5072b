"""Times are exact: every Timestamp / Duration field survives wire -> engine -> wire to the nanosecond."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_server_min._engine.clock import MAX_INSTANT, MIN_INSTANT, NANOS, FakeClock
from conveyor_server_min._engine.events import Subscription
from conveyor_server_min._services.convert import duration, timestamp
from tests.server_engine._harness import Worker, call, enqueue, get, make

# The example (…:11.861470000Z came back as …:11.861469952Z) plus digits in every place.
NOW = 1_800_000_011 * NANOS + 861_470_000
ODD = 123_456_789


def _ts(nanos: int) -> dict[str, int]:
    seconds, rest = divmod(nanos, NANOS)
    return {"seconds": seconds, "nanos": rest}


def _dur(nanos: int) -> dict[str, int]:
    return {"seconds": nanos // NANOS, "nanos": nanos % NANOS}


def _ns(msg: object) -> int:
    return msg.seconds * NANOS + msg.nanos  # type: ignore[attr-defined]


def test_every_task_time_field_round_trips_exactly() -> None:
    """Enqueue options, TaskInfo, the dispatched envelope, Dispatch.deadline, events and completion are
    exact to the nanosecond."""

    async def main() -> None:
        services, clock = make()
        clock.set(NOW)
        sub = Subscription(frozenset(), frozenset())
        services.engine.events.subscribe(sub)
        req = pb.EnqueueRequest(
            type="t",
            process_at=_ts(NOW - 7),  # in the past: PENDING, but stored and echoed exactly
            deadline=_ts(NOW + 3 * NANOS + ODD),
            expires_at=_ts(NOW + 3600 * NANOS + 1),
            timeout=_dur(NANOS + ODD),
            unique_key="u",
            unique_ttl=_dur(5 * NANOS + 987_654_321),
            retention=_dur(60 * NANOS + 1),
            retry_policy=tpb.RetryPolicy(base=_dur(ODD), max=_dur(2 * NANOS + 1)),
        )
        info = (await call(services, "Enqueue", req)).task
        assert _ns(info.enqueued_at) == NOW
        assert _ns(info.process_at) == NOW - 7
        assert _ns((await get(services, info.id)).process_at) == NOW - 7

        w = Worker(services)
        welcome = await w.open()
        assert _ns(welcome.lease_ttl) == 2 * NANOS
        d = await w.dispatch()
        env, opts = d.task, d.task.options
        assert _ns(env.enqueued_at) == NOW and _ns(env.started_at) == NOW
        assert _ns(opts.process_at) == NOW - 7
        assert _ns(opts.deadline) == NOW + 3 * NANOS + ODD
        assert _ns(opts.expires_at) == NOW + 3600 * NANOS + 1
        assert _ns(opts.timeout) == NANOS + ODD
        assert _ns(opts.unique_ttl) == 5 * NANOS + 987_654_321
        assert _ns(opts.retention) == 60 * NANOS + 1
        assert _ns(opts.retry_policy.base) == ODD and _ns(opts.retry_policy.max) == 2 * NANOS + 1
        assert _ns(d.deadline) == NOW + NANOS + ODD  # now + timeout is the earliest

        clock.set(NOW + ODD)
        w.result(info.id)
        await w.settle()
        done = await get(services, info.id)
        assert done.state == tpb.TASK_STATE_COMPLETED
        assert _ns(done.started_at) == NOW and _ns(done.completed_at) == NOW + ODD
        stamps = [e.occurred_at for e in sub.buffer]
        assert stamps == [NOW, NOW, NOW + ODD]  # enqueued, leased, completed
        sessions = await call(services, "ListWorkerSessions", pb.ListWorkerSessionsRequest())
        assert _ns(sessions.sessions[0].connected_at) == NOW
        await w.close()

    asyncio.run(main())


def test_admin_time_fields_round_trip_exactly() -> None:
    """RescheduleTask, group configs and the cluster start time keep every nanosecond."""

    async def main() -> None:
        services, _ = make(start=NOW)
        info = await enqueue(services, process_in=_dur(ODD))
        assert _ns(info.process_at) == NOW + ODD
        at = NOW + 86_400 * NANOS + 999_999_999
        await call(services, "RescheduleTask", pb.RescheduleTaskRequest(id=info.id, process_at=_ts(at)))
        assert _ns((await get(services, info.id)).process_at) == at
        await call(services, "RescheduleTask", pb.RescheduleTaskRequest(id=info.id, process_in=_dur(1)))
        assert _ns((await get(services, info.id)).process_at) == NOW + 1
        cfg = pb.SetGroupConfigRequest(
            queue="q", group="g", max_size=2, max_delay=_dur(NANOS + 1), grace_period=_dur(ODD)
        )
        await call(services, "SetGroupConfig", cfg)
        listed = (await call(services, "ListGroupConfigs", pb.ListGroupConfigsRequest())).configs[0]
        assert _ns(listed.max_delay) == NANOS + 1 and _ns(listed.grace_period) == ODD
        cluster = await call(services, "ClusterInfo", pb.ClusterInfoRequest())
        assert _ns(cluster.nodes[0].started_at) == NOW

    asyncio.run(main())


@settings(max_examples=200, deadline=None)
@given(st.integers(MIN_INSTANT, MAX_INSTANT))
def test_any_valid_process_at_is_stored_and_echoed_exactly(instant: int) -> None:
    """Any Timestamp in the valid range comes back from Enqueue and GetTask unchanged."""

    async def main() -> None:
        services, _ = make()
        info = await enqueue(services, process_at=_ts(instant))
        assert _ns(info.process_at) == instant
        assert _ns((await get(services, info.id)).process_at) == instant

    asyncio.run(main())


@given(st.integers(-315_576_000_000 * NANOS - 999_999_999, 315_576_000_000 * NANOS + 999_999_999))
def test_duration_encoding_is_exact_and_normalized(nanos: int) -> None:
    """Integer nanoseconds become a Duration with seconds and nanos of one sign, exactly."""
    d = duration(nanos)
    assert d.ToNanoseconds() == nanos
    assert (d.seconds >= 0 and d.nanos >= 0) or (d.seconds <= 0 and d.nanos <= 0)


def test_timestamp_encoding_never_fails() -> None:
    """An instant beyond the Timestamp range is clamped when encoded instead of raising."""
    assert timestamp(MAX_INSTANT + 10**30).ToNanoseconds() == MAX_INSTANT
    assert timestamp(MIN_INSTANT - 1).ToNanoseconds() == MIN_INSTANT
    assert FakeClock(NOW).now() == NOW


def test_batch_deadline_and_cron_next_run_are_exact() -> None:
    """BatchDispatch.deadline and ListCron next_run_at carry the engine's nanoseconds unchanged."""

    async def main() -> None:
        services, _ = make(start=NOW)
        w = Worker(services)
        await w.open(batch_types=["b"])
        for _ in range(3):
            await call(services, "Enqueue", pb.EnqueueRequest(type="b", group="g", timeout=_dur(ODD)))
        msg = await w.next()
        assert _ns(msg.batch_dispatch.deadline) == NOW + ODD
        entry = pb.CronEntry(id="c", spec="@every 1.000000001s", task_type="t")
        await call(services, "UpsertCron", pb.UpsertCronRequest(entry=entry))
        services.admin.cron.tick()
        listed = (await call(services, "ListCron", pb.ListCronRequest())).entries[0]
        assert _ns(listed.next_run_at) == NOW + NANOS + 1
        await w.close()

    asyncio.run(main())
