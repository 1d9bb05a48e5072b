"""SQLite store in-process: what a restart restores, lease accounting, commit-before-ack, atomic writes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Unavailable
from conveyor_server_min._engine.clock import MAX_INSTANT, MIN_INSTANT, NANOS, FakeClock
from conveyor_server_min._engine.model import Dependency, FailurePolicy, RetryPolicy, State, Task
from conveyor_server_min._engine.store import Changes, SqliteBroker, StoreError
from conveyor_server_min._engine.store.codec import decode_task, encode_task
from conveyor_server_min._services import Services, build_services
from tests.server_engine._harness import FAST, Worker, call, enqueue, get

S = tpb.TaskState


def _open(db: Path, clock: FakeClock) -> Services:
    return build_services(FAST, clock=clock, rand=lambda: 0.5, db=str(db))


async def _crash(services: Services) -> None:
    """Drop the process state as SIGKILL would: nothing more is committed; the file is closed."""
    committer = services.committer
    assert committer is not None
    committer.failure = "simulated crash"  # no further commits
    runner = committer._runner
    if runner is not None:
        runner.cancel()  # a commit not yet started never happens
        await asyncio.gather(runner, return_exceptions=True)
    await services.ticker.stop()
    committer._pool.shutdown(wait=True)
    committer.broker.close()


def test_codec_round_trips_every_field() -> None:
    """A task with every field set decodes to an equal task (token aside)."""
    huge = MAX_INSTANT  # beyond int64: stored exactly as (seconds, nanos)
    task = Task(
        id="01A", queue="q", type="t", enqueued_at=1_500_000_001, payload=b"\x00p",
        content_type="application/json", metadata={"k": "v"}, max_retry=3, priority=7, timeout=2 * NANOS,
        deadline=huge, process_at=MIN_INSTANT, unique_key="u", unique_ttl=60 * NANOS, retention=3600 * NANOS,
        group="", expires_at=99, depends_on=(Dependency("01B", FailurePolicy.CASCADE_CANCEL),),
        concurrency_key="ck", retry_policy=RetryPolicy(2, NANOS // 2, 30 * NANOS), state=State.BLOCKED,
        due=4, retried=2, last_error="boom", started_at=3, completed_at=None, progress=40,
        progress_message="half", result=b"r", lease_id=17, lease_expires_at=5, session_id="s1",
        cancel_requested=True, unique_until=61, waiting_on={"01B": FailurePolicy.CASCADE_CANCEL}, token=9,
    )  # fmt: skip
    back, arrived = decode_task(encode_task(task, 7_250_000_000), task.payload)
    assert arrived == 7_250_000_000
    for name in Task.__slots__:  # type: ignore[attr-defined]
        if name != "token":
            assert getattr(back, name) == getattr(task, name), name
    with pytest.raises(ValueError, match="malformed"):
        decode_task(b"\x93\x01")


def test_restart_restores_tasks_settings_and_cron(tmp_path: Path) -> None:
    """States, unique claims, dependencies, buckets, pause flags, limits, group configs and cron survive."""
    db, clock = tmp_path / "s.db", FakeClock()

    async def first() -> dict[str, str]:
        services = _open(db, clock)
        ids = {
            "pending": (await enqueue(services, queue="q", unique_key="uk", payload=b"\x00big" * 50_000)).id,
            "scheduled": (await enqueue(services, queue="q", process_at={"seconds": 1_800_000_100})).id,
            "agg": (await enqueue(services, queue="g", group="grp")).id,
            "done": (await enqueue(services, queue="w", retention={"seconds": 600})).id,
        }
        ids["blocked"] = (
            await enqueue(services, queue="q", depends_on=[tpb.TaskDependency(task_id=ids["done"])])
        ).id
        deps = [tpb.TaskDependency(task_id=ids["done"]), tpb.TaskDependency(task_id=ids["pending"])]
        ids["waiting"] = (await enqueue(services, queue="q", depends_on=deps)).id
        await call(services, "PauseQueue", pb.PauseQueueRequest(queue="q"))
        await call(
            services, "SetQueueRateLimit", pb.SetQueueRateLimitRequest(queue="w", rate_per_sec=5, burst=2)
        )
        await call(
            services, "SetQueueConcurrencyLimit", pb.SetQueueConcurrencyLimitRequest(queue="w", max_active=3)
        )
        group = pb.SetGroupConfigRequest(
            queue="g", group="grp", max_size=7, max_delay={"seconds": 30}, grace_period={"seconds": 5}
        )
        await call(services, "SetGroupConfig", group)
        await call(services, "UpsertCron", pb.UpsertCronRequest(
            entry=pb.CronEntry(id="c1", spec="*/10 * * * * *", task_type="tick", queue="cq")))  # fmt: skip
        services.admin.cron.tick()  # arms next_run = 1_800_000_010
        assert services.keeper is not None
        services.keeper.save()
        worker = Worker(services)
        await worker.open(queues={"w": 1})
        dispatch = await worker.dispatch()
        worker.result(dispatch.task.id)
        await worker.settle()
        await call(services, "GetTask", pb.GetTaskRequest(id=ids["done"]))  # waits for the commit
        await _crash(services)
        return ids

    async def second(ids: dict[str, str]) -> None:
        services = _open(db, clock)
        states = {name: (await get(services, i)).state for name, i in ids.items()}
        assert states == {"pending": S.TASK_STATE_PENDING, "scheduled": S.TASK_STATE_SCHEDULED,
                          "agg": S.TASK_STATE_AGGREGATING, "done": S.TASK_STATE_COMPLETED,
                          "blocked": S.TASK_STATE_PENDING, "waiting": S.TASK_STATE_BLOCKED}  # fmt: skip
        assert (await get(services, ids["pending"])).payload == b"\x00big" * 50_000
        conn = services.engine.broker._conn  # type: ignore[attr-defined]
        assert max(len(r) for (r,) in conn.execute("SELECT row FROM tasks")) < 1000  # payloads apart
        waiting = services.engine.get(ids["waiting"])
        assert waiting is not None and list(waiting.waiting_on) == [ids["pending"]]
        dup = await call(services, "EnqueueBatch", pb.EnqueueBatchRequest(tasks=[pb.EnqueueRequest(
            type="t", queue="q", unique_key="uk")]))  # fmt: skip
        assert dup.results[0].error == "broker: duplicate task"
        queues = {q.name: q for q in (await call(services, "ListQueues", pb.ListQueuesRequest())).queues}
        assert queues["q"].paused and not queues["w"].paused
        rates = (await call(services, "ListRateLimits", pb.ListRateLimitsRequest())).limits
        assert [(r.queue, r.rate_per_sec, r.burst) for r in rates] == [("w", 5, 2)]
        conc = (await call(services, "ListConcurrencyLimits", pb.ListConcurrencyLimitsRequest())).limits
        assert [(c.queue, c.max_active) for c in conc] == [("w", 3)]
        groups = (await call(services, "ListGroupConfigs", pb.ListGroupConfigsRequest())).configs
        assert [(g.queue, g.group, g.max_size, g.max_delay.seconds) for g in groups] == [("g", "grp", 7, 30)]
        cron = (await call(services, "ListCron", pb.ListCronRequest())).entries
        assert [(c.id, c.next_run_at.seconds) for c in cron] == [("c1", 1_800_000_010)]
        assert services.engine.broker.bucket("g", "grp") is not None
        await services.stop()

    asyncio.run(second(asyncio.run(first())))


def test_task_leased_at_crash_is_redelivered_after_lease_expiry_with_one_retry(tmp_path: Path) -> None:
    """ACTIVE at the crash: ACTIVE after restart until its lease expires, then RETRY (+1, "lease expired")."""
    db, clock = tmp_path / "s.db", FakeClock()

    async def first() -> str:
        services = _open(db, clock)
        task_id = (await enqueue(services, queue="default")).id
        worker = Worker(services)
        await worker.open()
        assert (await worker.dispatch()).task.id == task_id
        conn = services.engine.broker._conn  # type: ignore[attr-defined]
        row = conn.execute("SELECT state FROM tasks WHERE id = ?", (task_id,)).fetchone()
        assert row == (int(State.ACTIVE),)  # the Dispatch went out only after its lease was committed
        await _crash(services)
        return task_id

    async def second(task_id: str) -> None:
        services = _open(db, clock)
        assert (await get(services, task_id)).state == S.TASK_STATE_ACTIVE
        services.engine.reap()
        assert (await get(services, task_id)).state == S.TASK_STATE_ACTIVE  # lease still running
        clock.advance(FAST.lease_ttl + 0.1)
        services.engine.reap()
        info = await get(services, task_id)
        assert (info.state, info.retried, info.last_error) == (S.TASK_STATE_RETRY, 1, "lease expired")
        worker = Worker(services)
        await worker.open()
        dispatch = await worker.dispatch()
        assert dispatch.task.id == task_id and dispatch.task.retried == 1
        await services.stop()

    asyncio.run(second(asyncio.run(first())))


def test_acknowledged_means_committed_and_uncommitted_is_lost(tmp_path: Path) -> None:
    """An answered Enqueue survives a crash; a change the store never committed does not."""
    db, clock = tmp_path / "s.db", FakeClock()

    async def first() -> str:
        services = _open(db, clock)
        acked = (await enqueue(services, queue="q")).id
        services.admin.ops.archive(acked)  # changed in memory; nothing waited for its commit
        await _crash(services)
        return acked

    async def second(acked: str) -> None:
        services = _open(db, clock)
        assert (await get(services, acked)).state == S.TASK_STATE_PENDING
        await services.stop()

    asyncio.run(second(asyncio.run(first())))


def test_write_is_all_or_nothing(tmp_path: Path) -> None:
    """A snapshot that fails half-way leaves nothing of itself in the file."""
    broker = SqliteBroker(str(tmp_path / "s.db"), 0)
    good = encode_task(Task(id="a", queue="q", type="t", enqueued_at=0))
    broker.write(Changes(upserts=[("a", "q", 2, good)]))
    bad = Changes(upserts=[("b", "q", 2, good), ("c", None, 2, good)], deletes=["a"])  # type: ignore[list-item]
    with pytest.raises(StoreError, match="write failed"):
        broker.write(bad)
    rows = broker._conn.execute("SELECT id FROM tasks ORDER BY id").fetchall()
    assert rows == [("a",)]
    broker.close()


def test_failed_commit_fails_the_call_and_stops_the_store(tmp_path: Path) -> None:
    """When a commit cannot be written, the waiting call gets `unavailable` and the server is told to stop."""
    db, clock = tmp_path / "s.db", FakeClock()

    async def main() -> None:
        services = _open(db, clock)
        await enqueue(services, queue="q")
        broker = services.engine.broker
        assert isinstance(broker, SqliteBroker)
        broker._conn.close()  # the next write fails, as on an I/O error
        with pytest.raises(Unavailable, match="durable store failed"):
            await enqueue(services, queue="q")
        assert services.failed.is_set()
        with pytest.raises(Unavailable):
            await get(services, "anything")
        await services.ticker.stop()
        assert services.committer is not None
        services.committer._pool.shutdown(wait=True)

    asyncio.run(main())
