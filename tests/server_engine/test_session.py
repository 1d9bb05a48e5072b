"""WorkerService.Session in-process: Hello, Welcome, outcomes, leases, Cancel, Credit, Progress, close."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Code, ConveyorError
from conveyor_server_min._engine.clock import NANOS
from conveyor_server_min.service_api import EngineConfig
from tests.server_engine._harness import CTX, FAST, Worker, call, enqueue, get, make

S = tpb.TaskState
O = pb.TaskOutcome  # noqa: E741


async def _rejected(
    hello: dict[str, Any] | None, config: EngineConfig = FAST, first: Any = None
) -> ConveyorError:
    services, _ = make(config)
    w = Worker(services)
    if first is not None:
        w.inbox.put_nowait(first)
        w.task = asyncio.ensure_future(services.session(CTX, w._recv(), w._send))
    else:
        w.start(**(hello or {}))
    exc = await w.ended()
    assert isinstance(exc, ConveyorError), exc
    assert w.sent == [], "no Welcome before a rejection"
    return exc


HELLO_ERRORS = [
    (dict(concurrency=0), "protocol violation: concurrency must be positive, got 0"),
    (dict(queues={}, concurrency=1), "protocol violation: Hello must declare at least one queue"),
    (dict(queues={"bad name": 1}), 'protocol violation: invalid queue name "bad name"'),
    (dict(queues={"q": 0}), 'protocol violation: queue "q" weight must be positive, got 0'),
    (dict(queues={"q": -2}), 'protocol violation: queue "q" weight must be positive, got -2'),
    (
        dict(min_server_version="v9.0.0"),
        "server version v0.1.0 is older than the worker's required minimum v9.0.0; upgrade the server",
    ),
]


@pytest.mark.parametrize(("hello", "message"), HELLO_ERRORS)
def test_invalid_hello_fails_with_invalid_argument(hello: dict[str, Any], message: str) -> None:
    """Each Hello violation ends the stream with invalid_argument, the upstream message, and no Welcome."""
    exc = asyncio.run(_rejected(hello))
    assert exc.code is Code.INVALID_ARGUMENT
    assert exc.message == message


def test_hello_checks_run_in_upstream_order() -> None:
    """The version gate is checked before concurrency, and concurrency before queues."""
    exc = asyncio.run(_rejected(dict(queues={}, concurrency=0, min_server_version="v9.0.0")))
    assert exc.message.startswith("server version")
    exc = asyncio.run(_rejected(dict(queues={}, concurrency=0)))
    assert exc.message == "protocol violation: concurrency must be positive, got 0"


def test_first_frame_must_be_hello() -> None:
    """A non-Hello first frame (or an empty one) is a protocol violation."""
    for first in (pb.WorkerMessage(credit=pb.Credit(n=1)), pb.WorkerMessage()):
        exc = asyncio.run(_rejected(None, first=first))
        assert exc.code is Code.INVALID_ARGUMENT
        assert exc.message == "protocol violation: first frame must be Hello"


def test_version_handshake_rules() -> None:
    """Old semver SDKs are rejected; non-semver values and devel servers always pass."""
    strict = EngineConfig(min_sdk_version="v1.0.0")
    exc = asyncio.run(_rejected(dict(sdk_version="v0.9.0"), config=strict))
    assert exc.code is Code.INVALID_ARGUMENT

    async def admitted(config: EngineConfig, **hello: Any) -> pb.Welcome:
        services, _ = make(config)
        w = Worker(services)
        welcome = await w.open(**hello)
        await w.close()
        return welcome

    assert asyncio.run(admitted(strict, sdk_version="1.0.0")).min_sdk_version == "v1.0.0"
    assert asyncio.run(admitted(strict, sdk_version="conveyor-py/0.1.0")).session_id
    devel = EngineConfig(server_version="devel")
    assert asyncio.run(admitted(devel, min_server_version="v9.9.9")).server_version == "devel"
    assert asyncio.run(admitted(FAST, min_server_version="v0.1.0")).session_id
    assert asyncio.run(admitted(FAST, min_server_version="not-semver")).session_id


def test_welcome_fields() -> None:
    """Welcome comes first with a ULID session id, lease_ttl, lease_ttl/3 heartbeat, versions."""

    async def main() -> None:
        services, _ = make()
        welcome = await Worker(services).open()
        assert len(welcome.session_id) == 26
        assert welcome.lease_ttl.ToNanoseconds() == 2_000_000_000
        assert welcome.heartbeat_interval.ToNanoseconds() == 666_666_666
        assert (welcome.server_version, welcome.min_sdk_version) == ("v0.1.0", "v0.0.0-0")
        await services.stop()

    asyncio.run(main())


def test_dispatch_carries_task_and_deadline() -> None:
    """Dispatch.deadline = min(lease expiry, task deadline, now + timeout); the envelope has options."""

    async def main() -> None:
        services, clock = make()
        now = clock.now()
        info = await enqueue(services, payload=b"p", metadata={"k": "v"}, timeout={"seconds": 1})
        w = Worker(services)
        await w.open()
        d = await w.dispatch()
        assert (d.task.id, d.task.payload, dict(d.task.metadata)) == (info.id, b"p", {"k": "v"})
        assert d.task.options.max_retry == 25 and d.task.options.priority == 4
        assert d.deadline.ToNanoseconds() == now + NANOS
        w.result(d.task.id)
        await enqueue(services)
        d2 = await w.dispatch()
        assert d2.deadline.ToNanoseconds() == now + 2 * NANOS
        w.result(d2.task.id)
        # a task deadline before the lease expiry (and before now + timeout) is the Dispatch deadline
        due = now + 3 * NANOS // 2
        deadline = {"seconds": due // NANOS, "nanos": due % NANOS}
        await enqueue(services, deadline=deadline, timeout={"seconds": 5})
        d3 = await w.dispatch()
        assert d3.deadline.ToNanoseconds() == due
        assert (await get(services, info.id)).state == S.TASK_STATE_COMPLETED
        await w.close()

    asyncio.run(main())


OUTCOMES = [
    (O.TASK_OUTCOME_SUCCESS, "boom", S.TASK_STATE_COMPLETED, "", 0),
    (O.TASK_OUTCOME_RETRY, "boom", S.TASK_STATE_RETRY, "boom", 1),
    (O.TASK_OUTCOME_SKIP_RETRY, "fatal", S.TASK_STATE_ARCHIVED, "fatal", 0),
    (O.TASK_OUTCOME_RELEASED, "", S.TASK_STATE_PENDING, "", 0),
    (O.TASK_OUTCOME_UNSPECIFIED, "", S.TASK_STATE_PENDING, "", 0),
]


@pytest.mark.parametrize(("outcome", "msg", "state", "last_error", "retried"), OUTCOMES)
def test_result_outcome_table(outcome: int, msg: str, state: int, last_error: str, retried: int) -> None:
    """Each Result outcome moves the task as the outcome table says (UNSPECIFIED acts as RELEASED)."""

    async def main() -> None:
        services, _ = make()
        info = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        await call(services, "PauseQueue", pb.PauseQueueRequest(queue="default"))  # hold redeliveries
        w.result(info.id, outcome, msg)
        await w.settle()
        task = await get(services, info.id)
        assert (task.state, task.last_error, task.retried) == (state, last_error, retried)
        assert w.pending() == []
        assert not w.task.done(), "the session survives every outcome"
        await w.close()

    asyncio.run(main())


def test_retry_exhaustion_archives_with_prefix() -> None:
    """RETRY with retried >= max_retry archives with 'retries exhausted: <msg>'."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services, max_retry=1)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        w.result(info.id, O.TASK_OUTCOME_RETRY, "e1")
        await w.settle()
        clock.advance(10)
        services.engine.wake_due()
        await w.dispatch()
        w.result(info.id, O.TASK_OUTCOME_RETRY, "e2")
        await w.settle()
        task = await get(services, info.id)
        expected = (S.TASK_STATE_ARCHIVED, "retries exhausted: e2", 1)
        assert (task.state, task.last_error, task.retried) == expected
        await w.close()

    asyncio.run(main())


def test_retry_backoff_delays_redelivery() -> None:
    """A RETRY is not redelivered before its backoff (default exponential 2s, jitter 0.5 -> 1s) elapses."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        w.result(info.id, O.TASK_OUTCOME_RETRY, "x")
        await w.settle()
        clock.advance(0.9)
        services.engine.wake_due()
        await w.settle()
        assert w.pending() == []
        clock.advance(0.2)
        services.engine.wake_due()
        again = await w.dispatch()
        assert again.task.retried == 1 and again.task.last_error == "x"
        await w.close()

    asyncio.run(main())


def test_close_releases_leased_tasks_without_retry_charge() -> None:
    """Clean close, protocol error and cancellation all release leased tasks, retried unchanged."""

    async def main() -> None:
        services, _ = make()
        ids = [(await enqueue(services)).id for _ in range(3)]
        for ending in ("close", "error", "cancel"):
            w = Worker(services)
            await w.open(concurrency=3)
            for _ in range(3):
                await w.dispatch()
            assert [(await get(services, i)).state for i in ids] == [S.TASK_STATE_ACTIVE] * 3
            if ending == "close":
                await w.close()
            elif ending == "error":
                w.send()  # empty frame
                exc = await w.ended()
                assert isinstance(exc, ConveyorError)
                assert exc.message == "protocol violation: empty or unknown frame"
            else:
                w.task.cancel()
                await asyncio.gather(w.task, return_exceptions=True)
            for i in ids:
                task = await get(services, i)
                assert (task.state, task.retried) == (S.TASK_STATE_PENDING, 0)

    asyncio.run(main())


def test_heartbeat_extends_lease_and_reaper_reclaims_unlisted() -> None:
    """Listed leases survive the reaper; an unlisted one expires into RETRY with 'lease expired'."""

    async def main() -> None:
        services, clock = make()
        a = await enqueue(services)
        b = await enqueue(services)
        w = Worker(services)
        await w.open(concurrency=2)
        await w.dispatch()
        await w.dispatch()
        clock.advance(1.5)
        w.heartbeat(a.id)
        await w.settle()
        clock.advance(1.0)
        services.engine.reap()
        ta, tb = await get(services, a.id), await get(services, b.id)
        assert ta.state == S.TASK_STATE_ACTIVE
        assert (tb.state, tb.retried, tb.last_error) == (S.TASK_STATE_RETRY, 1, "lease expired")
        await w.close()

    asyncio.run(main())


def test_lost_lease_heartbeat_gets_cancel_and_late_result_is_ignored() -> None:
    """Heartbeating a reclaimed task gets Cancel{task_id}; its late Result changes nothing."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        clock.advance(3)
        services.engine.reap()
        task = await get(services, info.id)
        assert (task.state, task.last_error, task.retried) == (S.TASK_STATE_RETRY, "lease expired", 1)
        w.heartbeat(info.id)
        cancel = await w.next()
        assert cancel.cancel.task_id == info.id
        w.result(info.id, O.TASK_OUTCOME_SUCCESS)  # frees the slot; the outcome itself is ignored
        again = await w.dispatch()
        assert (again.task.id, again.task.retried) == (info.id, 1)
        assert (await get(services, info.id)).state == S.TASK_STATE_ACTIVE
        await w.close()

    asyncio.run(main())


def test_results_for_unknown_ids_are_ignored() -> None:
    """A Result naming a task never dispatched to this session changes nothing and keeps the stream."""

    async def main() -> None:
        services, _ = make()
        info = await enqueue(services, queue="other")
        w = Worker(services)
        await w.open()
        w.result(info.id)
        w.result("no-such-task")
        await w.settle()
        assert (await get(services, info.id)).state == S.TASK_STATE_PENDING
        assert not w.task.done()
        await w.close()

    asyncio.run(main())


FRAME_ERRORS = [
    (dict(hello=pb.Hello(queues={"default": 1}, concurrency=1)), "protocol violation: duplicate Hello frame"),
    (dict(credit=pb.Credit(n=0)), "protocol violation: credit must be positive, got 0"),
    (dict(credit=pb.Credit(n=3)), "protocol violation: credit 3 exceeds declared concurrency 2"),
    (dict(result=pb.Result(outcome=1)), "protocol violation: Result without task_id"),
    (dict(result=pb.Result(task_id="x", outcome=9)), "protocol violation: undefined task outcome 9"),
    (
        dict(batch_result=pb.BatchResult(results=[pb.Result(outcome=1)])),
        "protocol violation: Result without task_id",
    ),
    (dict(progress=pb.Progress(percent=5)), "protocol violation: Progress without task_id"),
]


@pytest.mark.parametrize(("frame", "message"), FRAME_ERRORS)
def test_frame_violations_end_the_stream(frame: dict[str, Any], message: str) -> None:
    """Each frame-level violation ends the stream with invalid_argument and a clear message."""

    async def main() -> None:
        services, _ = make()
        w = Worker(services)
        await w.open(concurrency=2)
        w.send(**frame)
        exc = await w.ended()
        assert isinstance(exc, ConveyorError)
        assert (exc.code, exc.message) == (Code.INVALID_ARGUMENT, message)

    asyncio.run(main())


def test_progress_is_stored_clamped_and_reset_on_new_lease() -> None:
    """Progress is visible in GetTask, clamped to 100, and reset when the task is leased again."""

    async def main() -> None:
        services, _ = make()
        info = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        w.send(progress=pb.Progress(task_id=info.id, percent=250, message="almost"))
        w.send(progress=pb.Progress(task_id="unknown", percent=5))
        await w.settle()
        task = await get(services, info.id)
        assert (task.progress, task.progress_message) == (100, "almost")
        w.result(info.id, O.TASK_OUTCOME_RELEASED)
        d = await w.dispatch()
        assert d.task.progress == 0
        assert (await get(services, info.id)).progress == 0
        await w.close()

    asyncio.run(main())


def test_operator_cancel_of_active_task_sends_cancel_and_archives_on_retry() -> None:
    """CancelTask on an ACTIVE task sends Cancel; a later RETRY archives with 'canceled by admin: <msg>'."""

    async def main() -> None:
        services, _ = make()
        info = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        await call(services, "CancelTask", pb.CancelTaskRequest(id=info.id))
        assert (await w.next()).cancel.task_id == info.id
        w.result(info.id, O.TASK_OUTCOME_RETRY, "ctx canceled")
        await w.settle()
        task = await get(services, info.id)
        assert (task.state, task.last_error) == (S.TASK_STATE_ARCHIVED, "canceled by admin: ctx canceled")
        await w.close()

    asyncio.run(main())


def test_operator_cancel_then_success_still_completes() -> None:
    """SUCCESS after an operator cancel completes the task normally."""

    async def main() -> None:
        services, _ = make()
        info = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        await call(services, "CancelTask", pb.CancelTaskRequest(id=info.id))
        await w.next()
        w.result(info.id, O.TASK_OUTCOME_SUCCESS)
        await w.settle()
        assert (await get(services, info.id)).state == S.TASK_STATE_COMPLETED
        await w.close()

    asyncio.run(main())


def test_credit_restores_slot_lost_to_a_reclaimed_lease_but_never_exceeds_concurrency() -> None:
    """A reclaimed delivery holds its slot until Credit restores it; Credit never adds more."""

    async def main() -> None:
        services, clock = make()
        first = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        clock.advance(3)
        services.engine.reap()  # first -> RETRY, due now; the slot is still held by the lost delivery
        second = await enqueue(services)
        await w.settle()
        assert w.pending() == []
        w.send(credit=pb.Credit(n=1))
        d = await w.dispatch()
        assert d.task.id in (first.id, second.id)
        w.send(credit=pb.Credit(n=1))  # nothing lost now: must not exceed concurrency 1
        await w.settle()
        assert w.pending() == []
        await w.close()

    asyncio.run(main())


def test_heartbeat_omitting_a_lost_task_frees_its_slot() -> None:
    """Once the worker stops listing a reclaimed task, its slot is reusable."""

    async def main() -> None:
        services, clock = make()
        await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        clock.advance(3)
        services.engine.reap()
        await w.settle()
        assert w.pending() == []
        w.heartbeat()
        redelivered = await w.dispatch()
        assert redelivered.task.retried == 1
        await w.close()

    asyncio.run(main())


def test_stop_ends_sessions_cleanly_and_refuses_new_ones() -> None:
    """services.stop() ends live sessions with a clean return and releases their tasks."""

    async def main() -> None:
        services, _ = make()
        info = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        await services.stop()
        assert await w.ended() is None
        assert (await get(services, info.id)).state == S.TASK_STATE_PENDING
        late = Worker(services)
        late.start()
        exc = await late.ended()
        assert isinstance(exc, ConveyorError) and exc.code is Code.UNAVAILABLE

    asyncio.run(main())


def test_redelivery_to_the_same_session_supersedes_the_lost_delivery() -> None:
    """A task re-leased to the session that lost it occupies one slot, not two."""

    async def main() -> None:
        services, clock = make()
        info = await enqueue(services)
        w = Worker(services)
        await w.open(concurrency=2)
        await w.dispatch()
        clock.advance(3)
        services.engine.reap()  # lease lost; RETRY due now; held back until the session shows life
        await w.settle()
        assert w.pending() == []
        w.heartbeat(info.id)  # still listed: Cancel for the lost lease; the second slot takes it again
        assert (await w.next()).cancel.task_id == info.id
        again = await w.dispatch()
        assert (again.task.id, again.task.retried) == (info.id, 1)
        w.heartbeat(info.id)
        w.result(info.id)
        await w.settle()
        assert (await get(services, info.id)).state == S.TASK_STATE_COMPLETED
        for _ in range(2):
            await enqueue(services)
        await w.dispatch()
        await w.dispatch()
        await w.close()

    asyncio.run(main())
