"""Silent sessions and lapsed leases, in virtual time: the server stops feeding a worker it cannot hear.

Rules (docs/server-engine.md, "Silent sessions"): a session holding tasks that sends nothing for
``silent_session_intervals`` heartbeat intervals (3, i.e. one lease_ttl) is closed and its tasks
released with no retry charge (once per task; a second silent release is charged); a task whose
lease lapsed in a session goes to another session with a free slot, or back to the same one only
after that session was heard from.
"""

from __future__ import annotations

import asyncio
import dataclasses

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Code, ConveyorError
from conveyor_server_min._engine.transitions import MUTE_FREE
from tests.server_engine._harness import FAST, Worker, enqueue, get, make

S = tpb.TaskState
BOUND = FAST.lease_ttl  # 3 heartbeat intervals of lease_ttl / 3


def test_a_silent_session_holding_a_task_is_closed_and_the_task_released_free() -> None:
    """Nothing heard for 3 heartbeat intervals: the stream ends unavailable; the task runs elsewhere, free."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services)
        silent = Worker(services)
        await silent.open()
        await silent.dispatch()
        other = Worker(services)
        await other.open()
        other.heartbeat()  # a serving worker: it has spoken since its Hello
        await other.settle()
        clock.advance(BOUND - 0.01)
        assert services.engine.close_silent() == 0
        clock.advance(0.01)
        assert services.engine.close_silent() == 1
        exc = await silent.ended()
        assert isinstance(exc, ConveyorError) and exc.code is Code.UNAVAILABLE, exc
        assert "nothing received for 2.0s while holding tasks" in exc.message
        again = await other.dispatch()
        assert (again.task.id, again.task.retried) == (info.id, 0)
        other.result(info.id)
        await other.settle()
        done = await get(services, info.id)
        assert (done.state, done.retried) == (S.TASK_STATE_COMPLETED, 0)
        await other.close()

    asyncio.run(main())


def test_any_frame_restarts_the_silence_clock() -> None:
    """A heartbeat (even one listing nothing) or a Progress keeps a busy session open past the bound."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        clock.advance(BOUND * 0.9)
        w.send(progress=pb.Progress(task_id=info.id, percent=10))
        await w.settle()
        clock.advance(BOUND * 0.9)
        w.heartbeat(info.id)
        await w.settle()
        clock.advance(BOUND * 0.9)
        assert services.engine.close_silent() == 0
        assert (await get(services, info.id)).state == S.TASK_STATE_ACTIVE
        assert not w.task.done()  # type: ignore[union-attr]
        await w.close()

    asyncio.run(main())


def test_an_idle_silent_session_stays_and_its_clock_starts_at_its_first_task() -> None:
    """A session holding nothing is never closed for silence; once given a task it has a full bound."""

    async def main() -> None:
        services, clock = make()
        w = Worker(services)
        await w.open()
        clock.advance(BOUND * 10)
        assert services.engine.close_silent() == 0
        info = await enqueue(services)
        await w.dispatch()
        clock.advance(BOUND - 0.01)
        assert services.engine.close_silent() == 0
        clock.advance(0.01)
        assert services.engine.close_silent() == 1
        task = await get(services, info.id)
        assert (task.state, task.retried) == (S.TASK_STATE_PENDING, 0)
        await w.ended()

    asyncio.run(main())


def test_a_second_silent_release_is_charged_a_retry() -> None:
    """A task whose sessions keep going silent meets its retry bound (the poison-pill bound of §5.10)."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services)
        for want in (0, 1, 2):
            w = Worker(services)
            await w.open()
            w.heartbeat()  # each worker served (spoke after its Hello), then froze with the task
            got = await w.dispatch()
            assert got.task.id == info.id
            w.heartbeat(info.id)
            await w.settle()
            clock.advance(BOUND)
            assert services.engine.close_silent() == 1
            task = await get(services, info.id)
            assert task.retried == want
            await w.ended()
        assert task.last_error == "session went silent"

    asyncio.run(main())


def test_sessions_that_never_spoke_after_their_hello_cost_a_task_nothing() -> None:
    """One-way loss server to worker: each reconnect's Hello gets through, its Welcome does not, and
    the session says nothing more while the server feeds it the task. Ten such silent closes in a
    row charge nothing (the task would otherwise be ARCHIVED unrun); the eleventh is charged, so a
    task that freezes every fresh worker before its first Heartbeat still meets its retry bound."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services, max_retry=2)
        first = Worker(services)
        await first.open()
        await first.dispatch()
        first.heartbeat(info.id)  # the worker had the task, then its link went one-way
        await first.settle()
        clock.advance(BOUND)
        assert services.engine.close_silent() == 1
        await first.ended()
        for n in range(MUTE_FREE + 1):  # reconnects whose Welcome is lost: never a frame after Hello
            mute = Worker(services)
            await mute.open()
            got = await mute.dispatch()
            assert got.task.id == info.id
            clock.advance(BOUND)
            assert services.engine.close_silent() == 1
            await mute.ended()
            task = await get(services, info.id)
            want = (S.TASK_STATE_PENDING, 0) if n < MUTE_FREE else (S.TASK_STATE_RETRY, 1)
            assert (task.state, task.retried) == want, n
        assert task.last_error == "session went silent"

    asyncio.run(main())


def test_the_reaper_pass_closes_silent_sessions_before_expiring_leases() -> None:
    """When the silence bound and the lease lapse fall in one pass, the task is released, not charged."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        clock.advance(BOUND + 1)  # both due: the lease lapsed and the session is silent
        services.ticker.reap()
        task = await get(services, info.id)
        assert (task.state, task.retried, task.last_error) == (S.TASK_STATE_PENDING, 0, "session went silent")
        await w.ended()

    asyncio.run(main())


def test_the_rule_can_be_turned_off() -> None:
    """silent_session_intervals=0: a silent session stays, and its lease lapses with a charge."""

    async def main() -> None:
        services, clock = make(dataclasses.replace(FAST, silent_session_intervals=0))
        info = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        clock.advance(BOUND * 5)
        services.ticker.reap()
        task = await get(services, info.id)
        assert (task.state, task.retried, task.last_error) == (S.TASK_STATE_RETRY, 1, "lease expired")
        assert not w.task.done()  # type: ignore[union-attr]
        await w.close()

    asyncio.run(main())


async def _lapse_in(services: object, clock: object, w: Worker, task_id: str) -> None:
    """Keep ``w`` alive with empty heartbeats until ``task_id``'s lease lapses and is reaped."""
    for _ in range(3):
        clock.advance(BOUND / 2)  # type: ignore[attr-defined]
        w.heartbeat()
        await w.settle()
    services.engine.reap()  # type: ignore[attr-defined]


def test_a_lapsed_task_goes_to_another_session_with_a_free_slot() -> None:
    """Not straight back to the session it lapsed in, though that one has a free slot and far more weight."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services)
        lapsed = Worker(services)
        await lapsed.open(concurrency=2, queues={"default": 100})
        await lapsed.dispatch()
        rescuer = Worker(services)
        await rescuer.open(queues={"default": 1})
        await _lapse_in(services, clock, lapsed, info.id)
        got = await rescuer.dispatch()
        assert (got.task.id, got.task.retried) == (info.id, 1)
        lapsed.heartbeat()
        await lapsed.settle()
        assert [m for m in lapsed.pending() if m.WhichOneof("frame") == "dispatch"] == []
        await lapsed.close()
        await rescuer.close()

    asyncio.run(main())


def test_a_lapsed_task_returns_to_its_session_when_no_other_has_room() -> None:
    """Another session serves the queue but is full: the session it lapsed in, heard since, takes it back."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services)
        lapsed = Worker(services)
        await lapsed.open(concurrency=2)
        await lapsed.dispatch()
        busy = Worker(services)
        await busy.open(queues={"default": 1, "elsewhere": 1})
        blocker = await enqueue(services, queue="elsewhere")
        assert (await busy.dispatch()).task.id == blocker.id
        await _lapse_in(services, clock, lapsed, info.id)
        clock.advance(0.1)
        lapsed.heartbeat()
        got = await lapsed.dispatch()
        assert (got.task.id, got.task.retried) == (info.id, 1)
        await lapsed.close()
        await busy.close()

    asyncio.run(main())


def test_a_declined_task_does_not_hold_back_the_tasks_behind_it() -> None:
    """While the lapsed head task waits for a sign of life, the session still gets the next task."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services, priority=9)
        w = Worker(services)
        await w.open(concurrency=2)
        await w.dispatch()
        clock.advance(BOUND * 0.6)
        w.heartbeat()
        await w.settle()
        clock.advance(BOUND * 0.6)
        services.engine.reap()  # lapsed; not heard from since
        later = await enqueue(services, priority=1)
        assert (await w.dispatch()).task.id == later.id
        clock.advance(0.1)
        w.heartbeat(later.id)  # a sign of life, and the lost delivery's slot frees
        got = await w.dispatch()
        assert (got.task.id, got.task.retried) == (info.id, 1)
        await w.close()

    asyncio.run(main())


def test_a_sole_session_gets_its_lapsed_task_back_only_after_it_shows_life() -> None:
    """With no other session, the lapsed task waits for the next frame from the session, then goes to it."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services)
        w = Worker(services)
        await w.open(concurrency=2)
        await w.dispatch()
        clock.advance(BOUND * 0.6)
        w.heartbeat()
        await w.settle()
        clock.advance(BOUND * 0.6)  # the lease lapses; the session was last heard before that
        services.engine.reap()
        await w.settle()
        assert w.pending() == []
        clock.advance(0.1)
        w.heartbeat()
        got = await w.dispatch()
        assert (got.task.id, got.task.retried) == (info.id, 1)
        await w.close()

    asyncio.run(main())
