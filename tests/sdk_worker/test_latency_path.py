"""The start path of a Dispatch: handled in the socket read's own turn when the worker is idle, in order."""

from __future__ import annotations

import asyncio

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._protocol.framing import encode_frame
from conveyor_sdk.testing import PeerSession, ScriptedPeer
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker


def _welcome() -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.welcome.session_id = "S-latency"
    msg.welcome.lease_ttl.FromSeconds(30)
    msg.welcome.heartbeat_interval.FromSeconds(10)
    return msg


def _dispatch(tid: str) -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.dispatch.task.CopyFrom(tpb.TaskEnvelope(id=tid, queue="default", type="t"))
    return msg


def _cancel(tid: str) -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.cancel.task_id = tid
    return msg


async def _result(sess: PeerSession) -> pb.Result:
    while True:
        msg = await sess.recv(10)
        assert msg is not None, "client half-closed unexpectedly"
        if msg.WhichOneof("frame") == "result":
            return msg.result


def _run(script: object, registry: Registry) -> None:
    async def main() -> None:
        async with ScriptedPeer("grpc") as peer:
            worker = Worker(peer.url, close_timeout=0.5)
            run = asyncio.create_task(worker.run(registry))
            try:
                await script(peer, worker)  # type: ignore[operator]
            finally:
                worker.stop(immediate=True)
                await asyncio.wait_for(asyncio.gather(run, return_exceptions=True), 20)

    asyncio.run(main())


def test_idle_worker_takes_dispatches_in_the_read_turn() -> None:
    """An idle worker starts each Dispatch from the socket callback (counted), and answers it."""
    reg = Registry()

    @reg.handler("t")
    async def handler(task: TaskData, ctx: TaskContext) -> bytes:
        return b"ok"

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess = await peer.accept()
        assert (await sess.recv()) is not None  # Hello
        await sess.send_headers()
        await sess.send(_welcome())
        for i in range(5):
            await sess.send(_dispatch(f"T{i}"))
            res = await _result(sess)
            assert (res.task_id, res.outcome) == (f"T{i}", pb.TASK_OUTCOME_SUCCESS)
        stats = worker.statistics()
        assert stats["jobs_started"] == 5
        assert stats["frames_in_read_turn"] >= 5, stats

    _run(script, reg)


def test_dispatch_and_cancel_in_one_read_keep_their_order() -> None:
    """Dispatch then Cancel of the same task in one socket read: the started job is cancelled."""
    reg = Registry()
    started = asyncio.Event()

    @reg.handler("t")
    async def handler(task: TaskData, ctx: TaskContext) -> bytes:
        started.set()
        await ctx.until_cancelled()
        return b"should not be reported as success"

    async def script(peer: ScriptedPeer, worker: Worker) -> None:
        sess = await peer.accept()
        assert (await sess.recv()) is not None  # Hello
        await sess.send_headers()
        await sess.send(_welcome())
        burst = encode_frame(_dispatch("A").SerializeToString()) + encode_frame(
            _cancel("A").SerializeToString()
        )
        await sess.send_raw(burst, framed=True)
        res = await _result(sess)
        assert (res.task_id, res.outcome, res.error_msg) == ("A", pb.TASK_OUTCOME_RETRY, "canceled by server")

    _run(script, reg)
