"""Aggregation groups in-process: firing by size / grace / max delay, batch delivery, BatchResult."""

from __future__ import annotations

import asyncio

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Code
from tests.server_engine._harness import Worker, call, call_error, enqueue, get, make

S = tpb.TaskState
O = pb.TaskOutcome  # noqa: E741


async def _batch(w: Worker) -> pb.BatchDispatch:
    msg = await w.next()
    assert msg.WhichOneof("frame") == "batch_dispatch", msg
    return msg.batch_dispatch


def test_group_fires_on_size_as_one_batch_using_one_slot() -> None:
    """Three grouped tasks (max size 3) go as ONE BatchDispatch to a capable session of concurrency 1."""

    async def main() -> None:
        services, _ = make()
        w = Worker(services)
        await w.open(concurrency=1, batch_types=["sum"])
        infos = [await enqueue(services, type="sum", group="g") for _ in range(3)]
        assert infos[0].state == S.TASK_STATE_AGGREGATING
        batch = await _batch(w)
        assert batch.group == "g"
        assert [t.id for t in batch.tasks] == [i.id for i in infos]
        assert [(await get(services, i.id)).state for i in infos] == [S.TASK_STATE_ACTIVE] * 3
        await w.close()

    asyncio.run(main())


def test_group_fires_after_grace_period_since_last_member() -> None:
    """A small group fires once the grace period passes with no new member."""

    async def main() -> None:
        services, clock = make()
        w = Worker(services)
        await w.open(batch_types=["t"])
        await enqueue(services, group="g")
        clock.advance(0.4)
        await enqueue(services, group="g")
        clock.advance(0.4)
        assert services.engine.sweep_groups() == 0
        clock.advance(0.2)
        assert services.engine.sweep_groups() == 1
        assert len((await _batch(w)).tasks) == 2
        await w.close()

    asyncio.run(main())


def test_group_config_override_and_max_delay() -> None:
    """A per-group override (size 100, grace 10s, max delay 1s) fires on max delay since the first member."""

    async def main() -> None:
        services, clock = make()
        cfg = pb.SetGroupConfigRequest(
            queue="default", group="g", max_size=100, max_delay={"seconds": 1}, grace_period={"seconds": 10}
        )
        await call(services, "SetGroupConfig", cfg)
        listed = await call(services, "ListGroupConfigs", pb.ListGroupConfigsRequest())
        assert [(c.group, c.max_size) for c in listed.configs] == [("g", 100)]
        w = Worker(services)
        await w.open(batch_types=["t"])
        for _ in range(5):
            await enqueue(services, group="g")
            clock.advance(0.25)
            services.engine.sweep_groups()
        assert len((await _batch(w)).tasks) == 4
        await w.close()

    asyncio.run(main())


def test_group_keeps_aggregating_without_capable_session_or_when_paused() -> None:
    """No session advertising the type (or a paused queue) means the group keeps aggregating."""

    async def main() -> None:
        services, clock = make()
        plain = Worker(services)
        await plain.open(concurrency=5)
        infos = [await enqueue(services, group="g") for _ in range(3)]
        clock.advance(1)
        assert services.engine.sweep_groups() == 0
        await plain.settle()
        assert plain.pending() == []
        await call(services, "PauseQueue", pb.PauseQueueRequest(queue="default"))
        capable = Worker(services)
        await capable.open(batch_types=["t"])
        assert services.engine.sweep_groups() == 0
        await call(services, "ResumeQueue", pb.ResumeQueueRequest(queue="default"))
        assert len((await _batch(capable)).tasks) == 3
        assert (await get(services, infos[0].id)).state == S.TASK_STATE_ACTIVE
        await plain.close()
        await capable.close()

    asyncio.run(main())


def test_batch_result_outcomes_and_omitted_members() -> None:
    """Members: SUCCESS completes, RETRY redelivers singly, an omitted member is released and redelivered."""

    async def main() -> None:
        services, clock = make()
        w = Worker(services)
        await w.open(concurrency=1, batch_types=["t"])
        a, b, c = [await enqueue(services, group="g") for _ in range(3)]
        await _batch(w)
        results = [
            pb.Result(task_id=a.id, outcome=O.TASK_OUTCOME_SUCCESS),
            pb.Result(task_id=b.id, outcome=O.TASK_OUTCOME_RETRY, error_msg="flaky"),
        ]
        w.send(batch_result=pb.BatchResult(results=results))
        single = await w.dispatch()
        assert single.task.id == c.id and single.task.retried == 0
        assert (await get(services, a.id)).state == S.TASK_STATE_COMPLETED
        assert (await get(services, b.id)).state == S.TASK_STATE_RETRY
        w.result(c.id)
        clock.advance(5)
        services.engine.wake_due()
        again = await w.dispatch()
        assert (again.task.id, again.task.retried, again.task.last_error) == (b.id, 1, "flaky")
        await w.close()

    asyncio.run(main())


def test_heartbeat_extends_every_batch_member() -> None:
    """Listing batch members in heartbeats keeps all of their leases alive."""

    async def main() -> None:
        services, clock = make()
        w = Worker(services)
        await w.open(batch_types=["t"])
        ids = [(await enqueue(services, group="g")).id for _ in range(3)]
        await _batch(w)
        for _ in range(3):
            clock.advance(1.5)
            w.heartbeat(*ids)
            await w.settle()
            services.engine.reap()
        assert [(await get(services, i)).state for i in ids] == [S.TASK_STATE_ACTIVE] * 3
        await w.close()
        assert [(await get(services, i)).state for i in ids] == [S.TASK_STATE_PENDING] * 3

    asyncio.run(main())


def test_set_group_config_validation() -> None:
    """SetGroupConfig rejects max_size < 1 and non-positive delays; deleting an absent config succeeds."""

    async def main() -> None:
        services, _ = make()
        good = {"queue": "q", "max_size": 1, "max_delay": {"seconds": 1}, "grace_period": {"seconds": 1}}
        for override in (
            {"max_size": 0},
            {"max_delay": {}},
            {"grace_period": {"seconds": -1}},
            {"queue": ""},
        ):
            err = await call_error(
                services, "SetGroupConfig", pb.SetGroupConfigRequest(**{**good, **override})
            )
            assert err.code is Code.INVALID_ARGUMENT
        await call(services, "DeleteGroupConfig", pb.DeleteGroupConfigRequest(queue="q", group="nope"))

    asyncio.run(main())
