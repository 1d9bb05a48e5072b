"""The Ticker in virtual time: each timer-driven change happens exactly when its time comes, never before.

The services run their real Ticker task on :class:`VirtualTime`, which moves the engine's FakeClock
and the ticker's waits together: promotion, lapsed leases, silent sessions, group sweeps, retry
backoffs and rate-limit refills each happen at their virtual instant, and nothing waits for real.
(``test_loops.py`` keeps the same ticker on the real clock.)
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Code, ConveyorError
from conveyor_server_min._services import Services, build_services
from conveyor_server_min._services.loops import VirtualTime
from conveyor_server_min.service_api import EngineConfig
from tests.server_engine._harness import FAST, Worker, call, enqueue, get

S = tpb.TaskState
# Long cadences where a test is about one timer, so only that timer can explain what happens.
SLOW = EngineConfig(promote_interval=30, reap_interval=30, group_sweep_interval=30)


def _run(config: EngineConfig, body: Callable[[Services, VirtualTime], Awaitable[None]]) -> None:
    async def main() -> None:
        vt = VirtualTime()
        services = build_services(config, clock=vt.clock, rand=lambda: 0.5, ticker_time=vt)
        await services.start()
        try:
            await body(services, vt)
        finally:
            await services.stop()

    asyncio.run(main())


async def _frames(worker: Worker) -> list[str]:
    """The frames the worker got since last asked (after letting the session deliver them)."""
    await worker.settle()
    return [m.WhichOneof("frame") for m in worker.pending()]


def test_a_rate_limit_refill_wakes_dispatch_at_the_refill_instant() -> None:
    """Rate 20/s burst 1: the second task waits for its token (50 ms), not a moment less; the third too."""

    async def body(services: Services, vt: VirtualTime) -> None:
        rate = pb.SetQueueRateLimitRequest(queue="default", rate_per_sec=20, burst=1)
        await call(services, "SetQueueRateLimit", rate)
        for _ in range(3):
            await enqueue(services)
        w = Worker(services)
        await w.open(concurrency=5)
        assert await _frames(w) == ["dispatch"]  # the one token of the burst
        await vt.advance(0.049)
        assert await _frames(w) == []  # no token yet, and nothing else wakes dispatch
        await vt.advance(0.001)
        assert await _frames(w) == ["dispatch"]
        await vt.advance(0.049)
        assert await _frames(w) == []
        await vt.advance(0.001)
        assert await _frames(w) == ["dispatch"]
        await w.close()

    _run(SLOW, body)


def test_a_retry_backoff_elapses_into_a_redelivery_at_its_instant() -> None:
    """A RETRY with a fixed 100 ms backoff is redelivered by the ticker at 100 ms, not before."""

    async def body(services: Services, vt: VirtualTime) -> None:
        policy = tpb.RetryPolicy(strategy=tpb.RETRY_STRATEGY_FIXED, base={"nanos": 100_000_000})
        info = await enqueue(services, retry_policy=policy)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        w.result(info.id, pb.TASK_OUTCOME_RETRY, "again")
        assert await _frames(w) == []
        await vt.advance(0.099)
        assert await _frames(w) == []
        await vt.advance(0.001)
        again = await w.dispatch()
        assert (again.task.id, again.task.retried) == (info.id, 1)
        await w.close()

    _run(SLOW, body)


def test_the_promoter_releases_a_scheduled_task_on_its_next_pass() -> None:
    """A task due in 1 s is dispatched by the first promoter pass (every 100 ms) at or after 1 s."""

    async def body(services: Services, vt: VirtualTime) -> None:
        info = await enqueue(services, process_in={"seconds": 1})
        w = Worker(services)
        await w.open()
        await vt.advance(0.95)
        assert await _frames(w) == []
        assert (await get(services, info.id)).state == S.TASK_STATE_SCHEDULED
        await vt.advance(0.1)
        assert (await w.dispatch()).task.id == info.id
        await w.close()

    _run(dataclasses.replace(FAST, promote_interval=0.1), body)


async def _leased_until_just_before_the_ttl(
    services: Services, vt: VirtualTime
) -> tuple[pb.TaskInfo, Worker]:
    """One task enqueued and dispatched to a fresh worker session, then virtual time to 10 ms short of
    the lease's ttl."""
    info = await enqueue(services)
    w = Worker(services)
    await w.open()
    await w.dispatch()
    await vt.advance(FAST.lease_ttl - 0.01)
    return info, w


def test_the_reaper_charges_a_lapsed_lease_with_a_retry() -> None:
    """Silent-session rule off: a lease not renewed lapses at lease_ttl and the reaper charges a retry."""

    async def body(services: Services, vt: VirtualTime) -> None:
        info, w = await _leased_until_just_before_the_ttl(services, vt)
        assert (await get(services, info.id)).state == S.TASK_STATE_ACTIVE
        await vt.advance(0.01 + FAST.reap_interval)
        lapsed = await get(services, info.id)
        assert (lapsed.retried, lapsed.last_error) == (1, "lease expired")
        await w.close()

    _run(dataclasses.replace(FAST, silent_session_intervals=0), body)


def test_a_silent_session_is_closed_by_the_ticker_and_its_task_released_free() -> None:
    """Nothing heard for one lease_ttl: the ticker ends the session (unavailable); the task goes back free."""

    async def body(services: Services, vt: VirtualTime) -> None:
        info, w = await _leased_until_just_before_the_ttl(services, vt)
        await w.settle()
        assert w.task is not None and not w.task.done()
        await vt.advance(0.01 + FAST.promote_interval)
        exc = await w.ended()
        assert isinstance(exc, ConveyorError) and exc.code is Code.UNAVAILABLE, exc
        released = await get(services, info.id)
        assert (released.state, released.retried) == (S.TASK_STATE_PENDING, 0)

    _run(dataclasses.replace(FAST, reap_interval=30), body)  # the closer's own cadence, not the reaper's


def test_the_group_sweeper_fires_a_group_after_its_grace_period() -> None:
    """Two members of a group of at most 3 wait out the 0.5 s grace period, then go as one BatchDispatch."""

    async def body(services: Services, vt: VirtualTime) -> None:
        ids = [(await enqueue(services, type="agg", group="g")).id for _ in range(2)]
        w = Worker(services)
        await w.open(concurrency=5, batch_types=["agg"])
        await vt.advance(FAST.group_grace_period - 0.05)
        assert await _frames(w) == []
        await vt.advance(0.05 + FAST.group_sweep_interval)
        msg = await w.next()
        assert msg.WhichOneof("frame") == "batch_dispatch", msg
        assert sorted(t.id for t in msg.batch_dispatch.tasks) == sorted(ids)
        await w.close()

    _run(FAST, body)
