"""Enqueue replies show the task's initial state (§6.1), even when an idle worker takes it at once."""

from __future__ import annotations

import asyncio

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from tests.server_engine._harness import Worker, call, get, make

S = tpb.TaskState


def _initial(info: pb.TaskInfo, state: int = S.TASK_STATE_PENDING) -> None:
    assert info.state == state, S.Name(info.state)
    assert not info.HasField("started_at")


def test_enqueue_replies_show_initial_state_with_an_idle_worker() -> None:
    """Enqueue, EnqueueBatch and EnqueueTx answer PENDING without started_at although the task was
    dispatched before the reply went out."""

    async def main() -> None:
        services, _ = make()
        w = Worker(services)
        await w.open(concurrency=10)
        one = (await call(services, "Enqueue", pb.EnqueueRequest(type="t"))).task
        batch = await call(
            services, "EnqueueBatch", pb.EnqueueBatchRequest(tasks=[pb.EnqueueRequest(type="t")] * 2)
        )
        tx = await call(services, "EnqueueTx", pb.EnqueueTxRequest(tasks=[pb.EnqueueRequest(type="t")] * 2))
        replies = [one, *(r.task for r in batch.results), *tx.tasks]
        for info in replies:
            _initial(info)
        await w.settle()
        dispatched = {m.dispatch.task.id for m in w.pending() if m.WhichOneof("frame") == "dispatch"}
        assert dispatched == {info.id for info in replies}
        for info in replies:
            assert (await get(services, info.id)).state == S.TASK_STATE_ACTIVE
        await w.close()

    asyncio.run(main())


def test_the_member_that_fills_a_group_replies_aggregating() -> None:
    """The third member of a size-3 group answers AGGREGATING although the group fired on its enqueue."""

    async def main() -> None:
        services, _ = make()
        w = Worker(services)
        await w.open(batch_types=["b"])
        infos = [
            (await call(services, "Enqueue", pb.EnqueueRequest(type="b", group="g"))).task for _ in range(3)
        ]
        for info in infos:
            _initial(info, S.TASK_STATE_AGGREGATING)
        msg = await w.next()
        assert msg.WhichOneof("frame") == "batch_dispatch"
        assert len(msg.batch_dispatch.tasks) == 3
        await w.close()

    asyncio.run(main())


def test_tx_group_fill_replies_aggregating_for_every_member() -> None:
    """An EnqueueTx that fills a group answers AGGREGATING for each member, then the group fires."""

    async def main() -> None:
        services, _ = make()
        w = Worker(services)
        await w.open(batch_types=["b"])
        req = pb.EnqueueTxRequest(tasks=[pb.EnqueueRequest(type="b", group="g")] * 3)
        for info in (await call(services, "EnqueueTx", req)).tasks:
            _initial(info, S.TASK_STATE_AGGREGATING)
        assert (await w.next()).WhichOneof("frame") == "batch_dispatch"
        await w.close()

    asyncio.run(main())
