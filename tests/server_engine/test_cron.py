"""Cron RPCs in-process: validation, listing, arming, unique-slot materialization, pause/resume/delete."""

from __future__ import annotations

import asyncio

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Code
from conveyor_server_min._engine.clock import NANOS
from tests.server_engine._harness import call, call_error, make


def _entry(**fields: object) -> pb.UpsertCronRequest:
    base: dict[str, object] = {"id": "c1", "spec": "*/10 * * * * *", "task_type": "tick"}
    base.update(fields)
    return pb.UpsertCronRequest(entry=pb.CronEntry(**base))  # type: ignore[arg-type]


def test_upsert_validation() -> None:
    """id, task_type and a valid 6-field spec are required; bad queue and group+concurrency_key rejected."""

    async def main() -> None:
        services, _ = make()
        bad = [
            _entry(id=""),
            _entry(task_type=""),
            _entry(spec="* * * * *"),
            _entry(queue="no good"),
            _entry(options=tpb.TaskOptions(group="g", concurrency_key="k")),
        ]
        for req in bad:
            assert (await call_error(services, "UpsertCron", req)).code is Code.INVALID_ARGUMENT
        missing = await call_error(services, "PauseCron", pb.PauseCronRequest(id="nope"))
        assert missing.code is Code.NOT_FOUND
        await call(services, "DeleteCron", pb.DeleteCronRequest(id="nope"))

    asyncio.run(main())


def test_cron_materializes_due_slots_once() -> None:
    """An armed entry enqueues one task per due slot, with unique key cron:<id>:<slot> and the options."""

    async def main() -> None:
        services, clock = make()
        clock.set(1_800_000_001 * NANOS)
        opts = tpb.TaskOptions(priority=7, max_retry=3)
        await call(services, "UpsertCron", _entry(queue="cronq", payload=b"{}", options=opts))
        cron = services.admin.cron
        assert cron.tick() == 0  # arming
        listed = await call(services, "ListCron", pb.ListCronRequest())
        assert listed.entries[0].queue == "cronq"
        assert listed.entries[0].next_run_at.seconds == 1_800_000_010
        clock.set(1_800_000_010 * NANOS + NANOS // 2)
        assert cron.tick() == 1
        assert cron.tick() == 0
        tasks = (await call(services, "ListTasks", pb.ListTasksRequest(queue="cronq"))).tasks
        assert [(t.type, t.priority, t.max_retry, t.payload) for t in tasks] == [("tick", 7, 3, b"{}")]
        task = services.engine.get(tasks[0].id)
        assert task is not None and task.unique_key == "cron:c1:1800000010"

    asyncio.run(main())


def test_paused_cron_does_not_fire_and_resume_rearms() -> None:
    """PauseCron stops materialization; ResumeCron re-arms from now; DeleteCron removes the entry."""

    async def main() -> None:
        services, clock = make()
        await call(services, "UpsertCron", _entry())
        cron = services.admin.cron
        cron.tick()
        await call(services, "PauseCron", pb.PauseCronRequest(id="c1"))
        clock.advance(60)
        assert cron.tick() == 0
        listed = await call(services, "ListCron", pb.ListCronRequest())
        assert listed.entries[0].paused
        await call(services, "ResumeCron", pb.ResumeCronRequest(id="c1"))
        assert cron.tick() == 0
        clock.advance(10)
        assert cron.tick() == 1
        await call(services, "DeleteCron", pb.DeleteCronRequest(id="c1"))
        assert list((await call(services, "ListCron", pb.ListCronRequest())).entries) == []

    asyncio.run(main())
