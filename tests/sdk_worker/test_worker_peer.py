"""The Worker against a scripted (misbehaving) server: Ping, Cancel, fatal stops, reconnects, drain."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Code, InvalidArgument, PermissionDenied, Unauthenticated
from conveyor_sdk.testing import PeerSession, ScriptedPeer
from conveyor_sdk.worker import SDK_VERSION, Registry, TaskContext, TaskData, Worker
from tests.sdk_worker._helpers import callbacks_queued_so_far


def _welcome(interval: float = 0.2, ttl: float = 0.6) -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.welcome.session_id = "S-test"
    msg.welcome.lease_ttl.FromMilliseconds(int(ttl * 1000))
    msg.welcome.heartbeat_interval.FromMilliseconds(int(interval * 1000))
    return msg


def _dispatch(tid: str, type_: str = "t") -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.dispatch.task.CopyFrom(tpb.TaskEnvelope(id=tid, queue="default", type=type_))
    return msg


async def _next(sess: PeerSession, kind: str, timeout: float = 10.0) -> pb.WorkerMessage:
    """The next client frame of ``kind``, skipping heartbeats unless asked for."""
    while True:
        msg = await sess.recv(timeout)
        assert msg is not None, "client half-closed unexpectedly"
        if msg.WhichOneof("frame") == kind:
            return msg
        assert msg.WhichOneof("frame") == "heartbeat", f"unexpected {msg}"


async def _heartbeat_listing(sess: PeerSession, ids: list[str]) -> None:
    """Wait (10 s at most) for a Heartbeat listing exactly ``ids`` (earlier ones may predate a dispatch)."""
    async with asyncio.timeout(10):
        while sorted((await _next(sess, "heartbeat")).heartbeat.active_task_ids) != sorted(ids):
            pass


async def _open(peer: ScriptedPeer) -> tuple[PeerSession, pb.WorkerMessage]:
    sess = await peer.accept()
    hello = await sess.recv()
    assert hello is not None and hello.WhichOneof("frame") == "hello"
    return sess, hello


def _with_worker(
    script: Callable[[ScriptedPeer, Worker], Awaitable[None]],
    registry: Registry,
    protocol: str = "grpc",
    **kwargs: object,
) -> None:
    async def main() -> None:
        async with ScriptedPeer(protocol) as peer:
            worker = Worker(peer.url, protocol=protocol, close_timeout=0.5, **kwargs)  # type: ignore[arg-type]
            run = asyncio.create_task(worker.run(registry))
            try:
                await script(peer, worker)
            finally:
                if not run.done():
                    worker.stop(immediate=True)
                await asyncio.wait_for(asyncio.gather(run, return_exceptions=True), 20)

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_hello_then_ping_tolerated_and_dispatch_answered(protocol: str) -> None:
    """Hello carries our declaration; Ping gets no reply; a Dispatch gets one Result; heartbeats follow."""
    reg = Registry()
    reg.handler("t")(lambda task, ctx: b"r")
    reg.batch_handler("b")(lambda tasks, ctx: None)

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess, hello = await _open(peer)
        h = hello.hello
        assert dict(h.queues) == {"a": 2, "b": 1} and h.concurrency == 3
        assert h.sdk_version == SDK_VERSION and list(h.batch_types) == ["b"]
        assert dict(h.labels) == {"zone": "z1"}
        await sess.send(_welcome())
        await sess.send(pb.ServerMessage(ping=pb.Ping()))
        await sess.send(_dispatch("T1"))
        res = await _next(sess, "result")
        assert (res.result.task_id, res.result.outcome, res.result.result) == ("T1", 1, b"r")
        hb = await _next(sess, "heartbeat")
        assert list(hb.heartbeat.active_task_ids) == []

    _with_worker(script, reg, protocol, queues={"a": 2, "b": 1}, concurrency=3, labels={"zone": "z1"})


def test_cancel_frame_cancels_running_handler() -> None:
    """Cancel{task_id} stops the handler; the Result is RETRY 'canceled by server'."""
    reg = Registry()
    started = asyncio.Event()

    @reg.handler("t")
    async def t(task: TaskData, ctx: TaskContext) -> None:
        started.set()
        await asyncio.sleep(60)

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess, _ = await _open(peer)
        await sess.send(_welcome())
        await sess.send(_dispatch("T1"))
        await asyncio.wait_for(started.wait(), 10)
        await _heartbeat_listing(sess, ["T1"])
        await sess.send(pb.ServerMessage(cancel=pb.Cancel(task_id="T1")))
        res = await _next(sess, "result")
        assert (res.result.outcome, res.result.error_msg) == (2, "canceled by server")

    _with_worker(script, reg)


@pytest.mark.parametrize(
    ("code", "exc"),
    [
        (Code.UNAUTHENTICATED, Unauthenticated),
        (Code.PERMISSION_DENIED, PermissionDenied),
        (Code.INVALID_ARGUMENT, InvalidArgument),
    ],
)
def test_fatal_errors_stop_without_reconnecting(code: Code, exc: type[Exception]) -> None:
    """unauthenticated / permission_denied / invalid_argument end run() with that error, one attempt."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            peer.reject_next(code, "go away")
            worker = Worker(peer.url)
            with pytest.raises(exc, match="go away"):
                await asyncio.wait_for(worker.run(Registry()), 20)
            assert peer.sessions_opened == 1

    asyncio.run(main())


def test_invalid_argument_after_welcome_is_fatal() -> None:
    """A session ended by the server with invalid_argument (our protocol is wrong) is fatal."""

    async def main() -> None:
        async with ScriptedPeer("connect") as peer:
            worker = Worker(peer.url, protocol="connect")
            run = asyncio.create_task(worker.run(Registry()))
            sess, _ = await _open(peer)
            await sess.send(_welcome())
            await sess.end(Code.INVALID_ARGUMENT, "protocol violation: duplicate Hello frame")
            with pytest.raises(InvalidArgument, match="duplicate Hello"):
                await asyncio.wait_for(run, 20)
            assert peer.sessions_opened == 1

    asyncio.run(main())


def test_transient_errors_reconnect_and_welcome_resets_backoff() -> None:
    """unavailable / clean end reconnect; the failure counter resets on Welcome."""

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess, _ = await _open(peer)
        await sess.end(Code.UNAVAILABLE, "node draining")
        sess, _ = await _open(peer)
        assert worker.statistics()["reconnect_failures"] == 1
        await sess.send(_welcome())
        await _next(sess, "heartbeat")
        assert worker.statistics()["reconnect_failures"] == 0
        await sess.end()  # clean end: transient too
        sess, _ = await _open(peer)
        stats = worker.statistics()
        assert stats["reconnect_failures"] == 1 and stats["connections"] == 3
        assert peer.sessions_opened == 3

    _with_worker(script, Registry(), rng=lambda: 0.01)


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_dispatch_and_cancel_before_welcome_are_held_not_a_reconnect(protocol: str) -> None:
    """Dispatch A, Dispatch B, Cancel B before the Welcome (as conveyord may): one connection, A runs
    after the Welcome, B is answered RETRY unstarted, and nothing but the Hello precedes the Welcome."""
    reg = Registry()
    calls: list[str] = []
    reg.handler("t")(lambda task, ctx: calls.append(task.id) or b"ok")

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess, _ = await _open(peer)
        for frame in (_dispatch("A"), _dispatch("B"), pb.ServerMessage(cancel=pb.Cancel(task_id="B"))):
            await sess.send(frame)
        await peer.ping()  # the worker has read the three frames (same connection, in order)
        async with asyncio.timeout(10):
            while worker.statistics()["held_before_welcome"] < 3:
                await callbacks_queued_so_far()
        assert sess.unread == 0 and calls == []  # §5.3: no Result, Heartbeat, Progress yet
        await sess.send(_welcome())
        results = {}
        for _ in range(2):
            res = (await _next(sess, "result")).result
            results[res.task_id] = (res.outcome, res.error_msg)
        assert results == {"A": (1, ""), "B": (2, "canceled by server")}
        assert calls == ["A"]
        stats = worker.statistics()
        assert stats["connections"] == 1 and stats["held_before_welcome"] == 3
        assert peer.sessions_opened == 1

    _with_worker(script, reg, protocol)


def test_stop_while_awaiting_welcome_returns_promptly() -> None:
    """A server that opens the stream but never welcomes: stop() ends run() at once, not after the
    set-up or close timeout (10 s each here), since nothing has started that could need a drain."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            worker = Worker(peer.url, setup_timeout=10, close_timeout=10)
            run = asyncio.create_task(worker.run(Registry()))
            try:
                await _open(peer)  # the Hello is read; no Welcome is ever sent
                worker.stop()
                await asyncio.wait_for(asyncio.shield(run), 3)  # far below either timeout
            finally:
                if not run.done():
                    worker.stop(immediate=True)
                await asyncio.wait_for(asyncio.gather(run, return_exceptions=True), 30)
            assert peer.sessions_opened == 1

    asyncio.run(main())


def test_drain_heartbeats_late_dispatch_without_starting_it() -> None:
    """During a drain a late Dispatch is heartbeated, never started; the stream half-closes when idle."""
    reg = Registry()
    release = threading.Event()
    calls: list[str] = []

    @reg.handler("t")
    def t(task: TaskData, ctx: TaskContext) -> bytes:
        calls.append(task.id)
        release.wait(20)
        return b"done"

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess, _ = await _open(peer)
        await sess.send(_welcome())
        await sess.send(_dispatch("A"))
        await _heartbeat_listing(sess, ["A"])
        worker.stop()
        await sess.send(_dispatch("LATE"))
        await _heartbeat_listing(sess, ["A", "LATE"])
        release.set()
        res = await _next(sess, "result")
        assert (res.result.task_id, res.result.outcome) == ("A", 1)
        await sess.wait_closed_by_client()
        await sess.end()
        assert calls == ["A"]

    _with_worker(script, reg, concurrency=2, grace=30)


def test_stream_loss_drops_in_flight_work_and_reconnects() -> None:
    """A reset stream cancels its running handlers; nothing of it is reported on the next stream."""
    reg = Registry()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @reg.handler("t")
    async def t(task: TaskData, ctx: TaskContext) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            cancelled.set()

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess, _ = await _open(peer)
        await sess.send(_welcome())
        await sess.send(_dispatch("A"))
        await asyncio.wait_for(started.wait(), 10)
        await sess.reset()
        await asyncio.wait_for(cancelled.wait(), 10)
        sess2, _ = await _open(peer)
        await sess2.send(_welcome())
        hb = await _next(sess2, "heartbeat")
        assert list(hb.heartbeat.active_task_ids) == []
        assert worker.statistics()["dropped_on_disconnect"] == 1

    _with_worker(script, reg, rng=lambda: 0.01)


def test_batch_dispatch_one_batch_result_and_single_delivery_as_batch_of_one() -> None:
    """BatchDispatch -> one call and ONE BatchResult; a batch-typed single Dispatch -> batch of one."""
    reg = Registry()
    calls: list[tuple[tuple[str, ...], bool, str]] = []

    gate = asyncio.Event()

    @reg.batch_handler("b")
    async def b(tasks: list[TaskData], ctx: TaskContext) -> list[bytes]:
        calls.append((ctx.ids, ctx.is_batch, ctx.group))
        await gate.wait()
        return [t.id.encode() for t in tasks]

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess, hello = await _open(peer)
        assert list(hello.hello.batch_types) == ["b"]
        await sess.send(_welcome())
        batch = pb.ServerMessage()
        batch.batch_dispatch.group = "g"
        batch.batch_dispatch.tasks.extend(tpb.TaskEnvelope(id=i, queue="default", type="b") for i in "XYZ")
        await sess.send(batch)
        await _heartbeat_listing(sess, ["X", "Y", "Z"])  # every member is heartbeated
        gate.set()
        br = await _next(sess, "batch_result")
        assert [(r.task_id, r.outcome, r.result) for r in br.batch_result.results] == [
            ("X", 1, b"X"), ("Y", 1, b"Y"), ("Z", 1, b"Z"),
        ]  # fmt: skip
        await sess.send(_dispatch("SOLO", type_="b"))
        res = await _next(sess, "result")
        assert (res.result.task_id, res.result.result) == ("SOLO", b"SOLO")
        assert calls == [(("X", "Y", "Z"), True, "g"), (("SOLO",), True, "")]

    _with_worker(script, reg, concurrency=1)


def test_upstream_style_over_dispatch_is_gated_locally_and_parked_tasks_heartbeated() -> None:
    """Upstream grants `concurrency` per queue, so 2x arrive: only `concurrency` run, all are heartbeated."""
    reg = Registry()
    release = threading.Event()
    lock = threading.Lock()
    running: list[str] = []
    peak = 0

    @reg.handler("t")
    def t(task: TaskData, ctx: TaskContext) -> bytes:
        nonlocal peak
        with lock:
            running.append(task.id)
            peak = max(peak, len(running))
        release.wait(20)
        with lock:
            running.remove(task.id)
        return b"ok"

    def dispatch(tid: str, queue: str) -> pb.ServerMessage:
        msg = pb.ServerMessage()
        msg.dispatch.task.CopyFrom(tpb.TaskEnvelope(id=tid, queue=queue, type="t"))
        return msg

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess, hello = await _open(peer)
        assert hello.hello.concurrency == 2
        await sess.send(_welcome())
        ids = ["a1", "a2", "b1", "b2"]
        for tid in ids:
            await sess.send(dispatch(tid, tid[0]))
        await _heartbeat_listing(sess, ids)  # running and parked tasks alike keep their leases
        with lock:
            assert len(running) == 2, running
        release.set()
        results = [(await _next(sess, "result")).result for _ in ids]
        assert sorted(r.task_id for r in results) == ids
        assert {r.outcome for r in results} == {1}
        assert peak == 2

    _with_worker(script, reg, queues={"a": 1, "b": 1}, concurrency=2)
