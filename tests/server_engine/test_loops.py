"""The Ticker with the real clock: retry backoff and rate-limit refills wake dispatch without other events."""

from __future__ import annotations

import asyncio
import time

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_server_min._services import build_services
from conveyor_server_min.service_api import EngineConfig
from tests.server_engine._harness import Worker, call, enqueue

# Long maintenance intervals so only the timer-driven wake-ups can explain a redelivery.
SLOW = EngineConfig(promote_interval=30, reap_interval=30, group_sweep_interval=30)


def test_retry_backoff_elapses_into_a_redelivery() -> None:
    """A RETRY with a fixed 100 ms backoff is redelivered by the ticker's timer wake-up."""

    async def main() -> None:
        services = build_services(SLOW)
        await services.start()
        policy = tpb.RetryPolicy(strategy=tpb.RETRY_STRATEGY_FIXED, base={"nanos": 100_000_000})
        info = await enqueue(services, retry_policy=policy)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        w.result(info.id, pb.TASK_OUTCOME_RETRY, "again")
        redelivered = await w.dispatch()
        assert (redelivered.task.id, redelivered.task.retried) == (info.id, 1)
        await w.close()
        await services.stop()

    asyncio.run(main())


def test_rate_limit_refill_wakes_dispatch() -> None:
    """With rate 20/s burst 1, queued tasks keep flowing as tokens refill, one token (50 ms) apart."""

    async def main() -> None:
        services = build_services(SLOW)
        await services.start()
        rate = pb.SetQueueRateLimitRequest(queue="default", rate_per_sec=20, burst=1)
        await call(services, "SetQueueRateLimit", rate)
        for _ in range(3):
            await enqueue(services)
        w = Worker(services)
        opened = time.monotonic()
        await w.open(concurrency=5)
        arrivals: list[float] = []
        for _ in range(3):
            await w.dispatch()
            arrivals.append(time.monotonic())
        await w.close()
        # Without the limit all three arrive at once; with it, the first spends the burst token (no
        # earlier than the open) and each later one waits for a refill. Timed from the open, not
        # between arrivals: a late-seen first arrival (a loaded machine) shortens the gap after it.
        since_open = [t - opened for t in arrivals]
        assert all(t >= 0.04 * k for k, t in enumerate(since_open)), since_open
        await services.stop()

    asyncio.run(main())


def test_promoter_runs_on_its_interval() -> None:
    """The promoter pass turns a due SCHEDULED task into a dispatch."""

    async def main() -> None:
        services = build_services(EngineConfig(promote_interval=0.05, reap_interval=30))
        await services.start()
        info = await enqueue(services, process_in={"nanos": 50_000_000})
        w = Worker(services)
        await w.open()
        assert (await w.dispatch()).task.id == info.id
        await w.close()
        await services.stop()

    asyncio.run(main())
