"""Enqueue replies show the task's initial state (§6.1), even when an idle worker takes it at once."""

from __future__ import annotations

import asyncio
from dataclasses import fields

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_server_min._engine.clock import FakeClock
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.model import FailurePolicy, Outcome, State, Task
from conveyor_server_min._services.convert import task_info
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


def _engine_with_idle_worker(log: list[str]) -> Engine:
    engine = Engine(clock=FakeClock())
    session = engine.open_session(
        queues={"q": 1}, concurrency=4, sink=lambda action: log.append(f"dispatch {action.task.id}")
    )
    engine.start_session(session)
    return engine


def _task(task_id: str) -> Task:
    return Task(id=task_id, queue="q", type="t", enqueued_at=0, payload=b"p", metadata={"k": "v"})


def test_view_runs_after_the_dispatch_on_the_committed_snapshot() -> None:
    """Engine.enqueue / enqueue_tx hand the Dispatch to the worker first, then encode the reply from
    the task as committed: byte for byte what a server without workers answers."""
    log: list[str] = []
    engine = _engine_with_idle_worker(log)
    alone = Engine(clock=FakeClock())

    def view(task: Task) -> bytes:
        log.append(f"view {task.id} {task.state.name}")
        return task_info(task).SerializeToString()

    def quiet(task: Task) -> bytes:
        return task_info(task).SerializeToString()

    assert engine.enqueue(_task("a"), view) == alone.enqueue(_task("a"), quiet)
    tx = [_task("b"), _task("c")]
    assert engine.enqueue_tx(tx, view) == alone.enqueue_tx([_task("b"), _task("c")], quiet)
    assert log == [
        "dispatch a",
        "view a PENDING",
        "dispatch b",
        "dispatch c",
        "view b PENDING",
        "view c PENDING",
    ]
    live = engine.get("a")
    assert live is not None and live.state is State.ACTIVE and live.started_at is not None


def test_snapshot_is_independent_of_the_live_row() -> None:
    """A snapshot keeps every field, and later changes to the row (state, lease, dicts) do not reach it."""
    task = _task("a")
    task.waiting_on["p"] = FailurePolicy.BLOCK
    snap = task.snapshot()
    assert [getattr(snap, f.name) for f in fields(Task)] == [getattr(task, f.name) for f in fields(Task)]
    task.state, task.lease_id = State.ACTIVE, 7
    task.metadata["k2"] = "v2"
    del task.waiting_on["p"]
    assert (snap.state, snap.lease_id, snap.metadata, snap.waiting_on) == (
        State.PENDING,
        0,
        {"k": "v"},
        {"p": FailurePolicy.BLOCK},
    )


def test_the_reply_is_encoded_from_the_row_when_no_slot_can_take_the_task() -> None:
    """With every slot serving the queue taken (or no session at all), nothing can change the task
    before its reply: the view gets the committed row itself, and the task waits for a slot."""
    log: list[str] = []
    engine = Engine(clock=FakeClock())
    session = engine.open_session(
        queues={"q": 1}, concurrency=1, sink=lambda action: log.append(f"dispatch {action.task.id}")
    )
    engine.start_session(session)
    seen: list[Task] = []

    def view(task: Task) -> str:
        seen.append(task)
        return task.state.name

    assert engine.enqueue(_task("first"), view) == "PENDING"  # a free slot: viewed on a snapshot
    assert seen[-1] is not engine.get("first")
    assert engine.enqueue(_task("second"), view) == "PENDING"  # the only slot is taken
    assert seen[-1] is engine.get("second")
    other = _task("elsewhere")
    other.queue = "nobody-serves-this"
    assert engine.enqueue(other, view) == "PENDING"
    assert seen[-1] is engine.get("elsewhere")
    assert log == ["dispatch first"]
    engine.result(session, "first", Outcome.SUCCESS, "", b"")  # frees the slot
    assert log == ["dispatch first", "dispatch second"]


def test_the_timer_loop_hears_of_new_timers_only() -> None:
    """Engine.pump tells the timer loop (``on_timer_change``) when a delayed task or a rate wake
    was added, not after every commit: a plain Enqueue adds no timer."""
    engine = Engine(clock=FakeClock())
    told: list[int | None] = []
    engine.on_timer_change = lambda: told.append(engine.next_timer())
    engine.pump()
    assert told == [None]  # the first pump always tells
    for name in "abc":
        engine.enqueue(_task(name))
    assert told == [None]
    session = engine.open_session(queues={"q": 1}, concurrency=1, sink=lambda action: None)
    engine.start_session(session)
    assert told == [None]  # "a" went to the session: still no timer
    engine.result(session, "a", Outcome.RETRY, "again", b"")  # a retry with a backoff
    assert len(told) == 2 and told[-1] is not None
    assert told[-1] == engine.broker.next_timer()
