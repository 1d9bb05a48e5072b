"""Dispatch rules in-process: ordering, total concurrency, weights, pause, rate limits, concurrency keys."""

from __future__ import annotations

import asyncio
from collections import Counter

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_server_min._engine.clock import NANOS
from tests.server_engine._harness import Worker, call, enqueue, make


async def _drain(w: Worker, count: int) -> list[pb.Dispatch]:
    out = []
    for _ in range(count):
        d = await w.dispatch()
        out.append(d)
        w.result(d.task.id)
    return out


def test_dispatch_order_is_priority_then_due_then_id() -> None:
    """Higher priority first; equal priority by due time, then id (FIFO)."""

    async def main() -> None:
        services, clock = make()
        low = await enqueue(services, priority=1)
        a = await enqueue(services)
        b = await enqueue(services)
        high = await enqueue(services, priority=9)
        past = await enqueue(services, process_at={"seconds": clock.now() // NANOS - 60})
        w = Worker(services)
        await w.open()
        order = [d.task.id for d in await _drain(w, 5)]
        assert order == [high.id, past.id, a.id, b.id, low.id]
        await w.close()

    asyncio.run(main())


def test_concurrency_caps_outstanding_across_all_queues() -> None:
    """A session serving several queues never holds more than `concurrency` tasks in total."""

    async def main() -> None:
        services, _ = make()
        for q in ("a", "b", "c"):
            for _ in range(4):
                await enqueue(services, queue=q)
        w = Worker(services)
        await w.open(queues={"a": 1, "b": 1, "c": 1}, concurrency=2)
        await w.dispatch()
        second = await w.dispatch()
        await w.settle()
        assert w.pending() == []
        w.result(second.task.id)
        await w.dispatch()
        await w.settle()
        assert w.pending() == []
        await w.close()

    asyncio.run(main())


def test_session_weights_split_capacity_across_its_queues() -> None:
    """With work in every queue, a session's slots go to its queues in proportion to Hello weights."""

    async def main() -> None:
        services, _ = make()
        for _ in range(40):
            await enqueue(services, queue="hi")
            await enqueue(services, queue="lo")
        w = Worker(services)
        await w.open(queues={"hi": 3, "lo": 1}, concurrency=1)
        counts = Counter(d.task.queue for d in await _drain(w, 40))
        assert counts == {"hi": 30, "lo": 10}
        await w.close()

    asyncio.run(main())


def test_queue_tasks_spread_across_sessions_by_weight() -> None:
    """A queue's tasks go to the sessions serving it by smooth weighted round-robin on their weights."""

    async def main() -> None:
        services, _ = make()
        heavy, light = Worker(services), Worker(services)
        await heavy.open(queues={"q": 3}, concurrency=100)
        await light.open(queues={"q": 1}, concurrency=100)
        for _ in range(40):
            await enqueue(services, queue="q")
        await heavy.settle()
        assert (len(heavy.pending()), len(light.pending())) == (30, 10)
        await heavy.close()
        await light.close()

    asyncio.run(main())


def test_paused_queue_dispatches_nothing_until_resumed() -> None:
    """PauseQueue stops dispatch (enqueue still works); ResumeQueue dispatches the backlog."""

    async def main() -> None:
        services, _ = make()
        await call(services, "PauseQueue", pb.PauseQueueRequest(queue="default"))
        info = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.settle()
        assert w.pending() == []
        await call(services, "ResumeQueue", pb.ResumeQueueRequest(queue="default"))
        assert (await w.dispatch()).task.id == info.id
        await w.close()

    asyncio.run(main())


def test_rate_limit_gates_dispatch_by_token_bucket() -> None:
    """With rate 2/s burst 2, two tasks go at once and the next only after tokens refill."""

    async def main() -> None:
        services, clock = make()
        await call(
            services,
            "SetQueueRateLimit",
            pb.SetQueueRateLimitRequest(queue="default", rate_per_sec=2, burst=2),
        )
        for _ in range(4):
            await enqueue(services)
        w = Worker(services)
        await w.open(concurrency=10)
        await w.settle()
        assert len(w.pending()) == 2
        wake = services.engine.next_timer()
        assert wake == clock.now() + NANOS // 2
        clock.advance(0.5)
        services.engine.wake_due()
        await w.settle()
        assert len(w.pending()) == 1
        await call(services, "DeleteQueueRateLimit", pb.DeleteQueueRateLimitRequest(queue="default"))
        await w.settle()
        assert len(w.pending()) == 1
        await w.close()

    asyncio.run(main())


def test_concurrency_key_limit_holds_back_and_releases() -> None:
    """With max_active 1, only one task per key runs; the next is dispatched when the first finishes."""

    async def main() -> None:
        services, _ = make()
        limit = pb.SetQueueConcurrencyLimitRequest(queue="default", max_active=1)
        await call(services, "SetQueueConcurrencyLimit", limit)
        k1 = [await enqueue(services, concurrency_key="k1") for _ in range(2)]
        other = await enqueue(services, concurrency_key="k2")
        w = Worker(services)
        await w.open(concurrency=10)
        await w.settle()
        sent = [m.dispatch.task.id for m in w.pending()]
        assert sorted(sent) == sorted([k1[0].id, other.id])
        w.result(k1[0].id)
        assert (await w.dispatch()).task.id == k1[1].id
        await w.close()

    asyncio.run(main())


def test_removing_concurrency_limit_releases_parked_tasks() -> None:
    """Deleting the queue's concurrency limit lets held-back tasks go."""

    async def main() -> None:
        services, _ = make()
        limit = pb.SetQueueConcurrencyLimitRequest(queue="default", max_active=1)
        await call(services, "SetQueueConcurrencyLimit", limit)
        for _ in range(3):
            await enqueue(services, concurrency_key="k")
        w = Worker(services)
        await w.open(concurrency=10)
        await w.settle()
        assert len(w.pending()) == 1
        await call(
            services, "DeleteQueueConcurrencyLimit", pb.DeleteQueueConcurrencyLimitRequest(queue="default")
        )
        await w.settle()
        assert len(w.pending()) == 2
        await w.close()

    asyncio.run(main())


def test_only_served_queues_are_dispatched() -> None:
    """A session receives tasks only from the queues named in its Hello."""

    async def main() -> None:
        services, _ = make()
        await enqueue(services, queue="elsewhere")
        mine = await enqueue(services, queue="mine")
        w = Worker(services)
        await w.open(queues={"mine": 1}, concurrency=5)
        assert (await w.dispatch()).task.id == mine.id
        await w.settle()
        assert w.pending() == []
        await w.close()

    asyncio.run(main())
