"""HTTP/2 flow control both ways: large messages, send backpressure, bounded receive buffering."""

from __future__ import annotations

import asyncio

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import ResourceExhausted
from conveyor_sdk.testing import ScriptedPeer

from ._helpers import opened

MIB = 1 << 20


def _big_result(size: int, tag: str = "t") -> pb.WorkerMessage:
    return pb.WorkerMessage(result=pb.Result(task_id=tag, outcome=1, result=b"r" * size))


def _big_dispatch(size: int, tag: str = "t") -> pb.ServerMessage:
    task = tpb.TaskEnvelope(id=tag, queue="default", type="big", payload=b"p" * size)
    return pb.ServerMessage(dispatch=pb.Dispatch(task=task))


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_large_messages_both_ways(protocol: str) -> None:
    """3 MiB messages cross in both directions intact (many windows' worth of DATA frames)."""

    async def main() -> None:
        async with ScriptedPeer(protocol=protocol) as peer:
            stream, sess = await opened(peer)
            async with stream:
                out = _big_result(3 * MIB, "up")
                send = asyncio.create_task(stream.send(out))
                assert await sess.recv() == out
                await send
                down = _big_dispatch(3 * MIB, "down")
                await sess.send(down)
                assert await stream.recv() == down
                await sess.end()
                assert await stream.recv() is None

    asyncio.run(main())


def test_send_waits_for_window() -> None:
    """send() does not complete while the peer withholds window, and completes once the peer reads."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, sess = await opened(peer)
            async with stream:
                sess.recv_high_water = 0  # the peer stops granting window once a message is unread
                msg = _big_result(256 * 1024)
                await stream.send(msg)  # fits the unread-allowance + initial window
                blocked = asyncio.create_task(stream.send(msg))
                done, _ = await asyncio.wait({blocked}, timeout=0.5)
                assert not done, "send() finished although the peer gave no flow-control window"
                assert stream.statistics()["bytes_flushed"] < stream.statistics()["bytes_queued"]
                assert await sess.recv() == msg
                assert await sess.recv() == msg
                await asyncio.wait_for(blocked, 10)

    asyncio.run(main())


def test_receive_buffer_is_bounded() -> None:
    """When the application does not read, the client stops granting window, so the peer blocks."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, sess = await opened(peer)
            async with stream:
                msg = _big_dispatch(MIB)
                count = 24

                async def flood() -> None:
                    for _ in range(count):
                        await sess.send(msg)

                sender = asyncio.create_task(flood())
                done, _ = await asyncio.wait({sender}, timeout=1.0)
                assert not done, "the peer pushed 24 MiB although nobody read"
                buffered = stream.statistics()["unread_messages"]
                assert 1 <= buffered < 12
                for _ in range(count):
                    assert await stream.recv() == msg
                await asyncio.wait_for(sender, 10)

    asyncio.run(main())


def test_message_limits() -> None:
    """Messages above max_message are refused in both directions with ResourceExhausted."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, sess = await opened(peer, max_message=64 * 1024)
            async with stream:
                with pytest.raises(ResourceExhausted):
                    await stream.send(_big_result(100 * 1024))
                await sess.send(_big_dispatch(100 * 1024))
                with pytest.raises(ResourceExhausted, match="too large"):
                    await stream.recv()
                await sess.wait_closed_by_client()
                assert sess.client_reset is not None

    asyncio.run(main())


def test_concurrent_senders_keep_messages_whole() -> None:
    """Many tasks sending at once deliver every message intact and in per-task order."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, sess = await opened(peer)
            async with stream:

                async def worker(n: int) -> None:
                    for i in range(20):
                        await stream.send(_big_result(5000 + n * 100 + i, f"{n}-{i}"))

                tasks = [asyncio.create_task(worker(n)) for n in range(8)]
                seen: dict[str, list[int]] = {}
                for _ in range(8 * 20):
                    msg = await sess.recv()
                    assert msg is not None
                    n, i = msg.result.task_id.split("-")
                    assert len(msg.result.result) == 5000 + int(n) * 100 + int(i)
                    seen.setdefault(n, []).append(int(i))
                await asyncio.gather(*tasks)
                assert all(v == list(range(20)) for v in seen.values()) and len(seen) == 8

    asyncio.run(main())
