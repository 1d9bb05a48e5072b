"""Dispatch work does not grow with queues that hold no ready tasks (a Hello may declare 10,000)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.model import State
from conveyor_server_min._services.bounds import MAX_HELLO_QUEUES
from tests.server_engine._harness import Worker, call, make

MANY = {f"idle-{i:05d}": 1 for i in range(MAX_HELLO_QUEUES - 1)}
ROUNDS = 200


def _count_peeks(engine: Engine) -> list[int]:
    """Count the broker's ready-heap probes (a counter around the real method, not a stand-in)."""
    calls = [0]
    real: Callable[..., Any] = engine.broker.peek_ready

    def counted(queue: str, now: int) -> Any:
        calls[0] += 1
        return real(queue, now)

    engine.broker.peek_ready = counted  # type: ignore[method-assign]
    return calls


async def _drain(w: Worker, count: int) -> None:
    for _ in range(count):
        d = await w.dispatch()
        w.result(d.task.id)


def test_results_on_a_worker_with_many_empty_queues_probe_few_queues() -> None:
    """With 9,999 empty queues beside the busy one, each Result costs a handful of queue probes, not
    one per declared queue."""

    async def main() -> None:
        services, _ = make()
        await call(
            services, "EnqueueBatch", pb.EnqueueBatchRequest(tasks=[pb.EnqueueRequest(type="t")] * ROUNDS)
        )
        w = Worker(services)
        await w.open(queues={**MANY, "default": 1}, concurrency=4)
        calls = _count_peeks(services.engine)
        await _drain(w, ROUNDS)
        await w.settle()
        assert calls[0] < 10 * ROUNDS, f"{calls[0]} probes for {ROUNDS} dispatches"
        await w.close()

    asyncio.run(main())


def test_a_many_queue_worker_sharing_a_queue_adds_no_probes() -> None:
    """Two workers share the busy queue and one also declares 9,999 empty queues: dispatches to either
    cost a handful of probes (the shared queue's slot may go to the many-queue worker)."""

    async def main() -> None:
        services, _ = make()
        await call(
            services, "EnqueueBatch", pb.EnqueueBatchRequest(tasks=[pb.EnqueueRequest(type="t")] * ROUNDS)
        )
        wide, narrow = Worker(services), Worker(services)
        await wide.open(queues={**MANY, "default": 1}, concurrency=2)
        await narrow.open(concurrency=2)
        calls = _count_peeks(services.engine)
        done = 0
        while done < ROUNDS:
            await wide.settle()
            frames = [(w, m) for w in (wide, narrow) for m in w.pending()]
            assert frames, "dispatch stalled"
            for w, m in frames:
                w.result(m.dispatch.task.id)
                done += 1
        await wide.settle()
        assert calls[0] < 10 * ROUNDS, f"{calls[0]} probes for {ROUNDS} dispatches"
        await wide.close()
        await narrow.close()

    asyncio.run(main())


def test_due_retry_on_an_unserved_queue_leaves_no_past_timer() -> None:
    """A RETRY task that becomes due on a queue nobody serves is moved to the ready index by wake_due,
    so the engine's next timer is not stuck in the past (the ticker would spin on it)."""

    async def main() -> None:
        services, clock = make()
        engine = services.engine
        w = Worker(services)
        await w.open(queues={"gone": 1})
        info = (await call(services, "Enqueue", pb.EnqueueRequest(type="t", queue="gone"))).task
        d = await w.dispatch()
        w.result(d.task.id, pb.TASK_OUTCOME_RETRY, "x")
        await w.settle()
        await w.close()
        task = engine.get(info.id)
        assert task is not None and task.state is State.RETRY
        assert engine.next_timer() == task.due
        clock.set(task.due)
        engine.wake_due()
        assert engine.next_timer() is None
        back = Worker(services)
        await back.open(queues={"gone": 1})
        assert (await back.dispatch()).task.id == info.id
        await back.close()

    asyncio.run(main())
