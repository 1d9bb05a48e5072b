"""Time-driven lifecycle in-process (FakeClock): promotion, expiry, retention, lease expiry, backoff."""

from __future__ import annotations

import asyncio

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Code
from conveyor_server_min._engine.clock import NANOS
from tests.server_engine._harness import Worker, call_error, enqueue, get, make

S = tpb.TaskState
O = pb.TaskOutcome  # noqa: E741


def test_scheduled_task_is_promoted_then_dispatched() -> None:
    """A process_in task stays SCHEDULED until due, then the promoter makes it PENDING for dispatch."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services, process_in={"seconds": 5})
        w = Worker(services)
        await w.open()
        clock.advance(4.9)
        assert services.engine.promote() == 0
        await w.settle()
        assert w.pending() == []
        clock.advance(0.2)
        assert services.engine.promote() == 1
        assert (await w.dispatch()).task.id == info.id
        await w.close()

    asyncio.run(main())


def test_expired_waiting_task_is_archived_and_never_dispatched() -> None:
    """A waiting task past expires_at is archived with 'task expired before dispatch'."""

    async def main() -> None:
        services, clock = make()
        scheduled = await enqueue(services, expires_in={"seconds": 1}, process_in={"seconds": 10})
        pending = await enqueue(services, expires_in={"seconds": 1})
        clock.advance(2)
        services.engine.reap()
        for task_id in (scheduled.id, pending.id):
            task = await get(services, task_id)
            assert (task.state, task.last_error) == (S.TASK_STATE_ARCHIVED, "task expired before dispatch")
        late = await enqueue(services, expires_in={"seconds": 1})
        clock.advance(2)
        w = Worker(services)
        await w.open()
        await w.settle()
        assert w.pending() == []
        assert (await get(services, late.id)).last_error == "task expired before dispatch"
        await w.close()

    asyncio.run(main())


def test_completed_rows_are_purged_after_retention() -> None:
    """COMPLETED tasks are deleted by the reaper once retention lapses; GetTask then says not_found."""

    async def main() -> None:
        services, clock = make()
        kept = await enqueue(services, retention={"seconds": 60})
        w = Worker(services)
        await w.open()
        await w.dispatch()
        w.result(kept.id)
        await w.settle()
        clock.advance(59)
        services.engine.reap()
        assert (await get(services, kept.id)).state == S.TASK_STATE_COMPLETED
        clock.advance(2)
        services.engine.reap()
        err = await call_error(services, "GetTask", pb.GetTaskRequest(id=kept.id))
        assert err.code is Code.NOT_FOUND
        await w.close()

    asyncio.run(main())


def test_lease_expiry_archives_when_retries_exhausted() -> None:
    """A lease expiring with retried >= max_retry archives the task with 'lease expired'."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services, max_retry=1)
        for expected_state in (S.TASK_STATE_RETRY, S.TASK_STATE_ARCHIVED):
            w = Worker(services)
            await w.open()
            await w.dispatch()
            clock.advance(2.5)
            services.engine.reap()
            task = await get(services, info.id)
            assert (task.state, task.retried, task.last_error) == (expected_state, 1, "lease expired")
            w.task.cancel()
            await asyncio.gather(w.task, return_exceptions=True)

    asyncio.run(main())


def _retry_delay(policy: tpb.RetryPolicy | None, failures: int, rand: float = 0.5) -> float:
    async def main() -> float:
        services, clock = make(rand=rand)
        fields = {"max_retry": 50}
        if policy is not None:
            fields["retry_policy"] = policy
        info = await enqueue(services, **fields)
        w = Worker(services)
        await w.open()
        delay = 0.0
        for _ in range(failures):
            await w.dispatch()
            start = clock.now()
            w.result(info.id, O.TASK_OUTCOME_RETRY, "x")
            await w.settle()
            task = services.engine.get(info.id)
            assert task is not None
            delay = (task.due - start) / NANOS
            clock.set(task.due)
            services.engine.wake_due()
        await w.close()
        return delay

    return asyncio.run(main())


def test_default_backoff_is_exponential_full_jitter_with_cap() -> None:
    """Default: uniform[0, min(2s * 2^r, 15m)); rand 0.5 gives half the ceiling."""
    assert abs(_retry_delay(None, 1) - 1.0) < 1e-6
    assert abs(_retry_delay(None, 3) - 4.0) < 1e-6
    assert abs(_retry_delay(None, 12, rand=0.999) - 0.999 * 900) < 1e-3


def test_retry_policy_overrides_strategy_base_and_cap() -> None:
    """Per-task linear and fixed policies, zero fields falling back to the server default."""
    linear = tpb.RetryPolicy(strategy=tpb.RETRY_STRATEGY_LINEAR, base={"seconds": 10})
    assert abs(_retry_delay(linear, 3) - 0.5 * 30) < 1e-6
    fixed = tpb.RetryPolicy(strategy=tpb.RETRY_STRATEGY_FIXED, base={"seconds": 7}, max={"seconds": 5})
    assert abs(_retry_delay(fixed, 2) - 5) < 1e-6
    default_kind = tpb.RetryPolicy(base={"seconds": 1})
    assert abs(_retry_delay(default_kind, 2) - 0.5 * 2) < 1e-6
