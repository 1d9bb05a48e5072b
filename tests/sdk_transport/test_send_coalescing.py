"""The messages a turn's send_nowait calls queue reach the server in one DATA frame, in order."""

from __future__ import annotations

import asyncio

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import ResourceExhausted
from conveyor_sdk.testing import ScriptedPeer

from ._helpers import opened


def _result(task_id: str) -> pb.WorkerMessage:
    return pb.WorkerMessage(result=pb.Result(task_id=task_id, outcome=pb.TASK_OUTCOME_SUCCESS))


def test_one_turns_results_share_a_data_frame_and_keep_their_order() -> None:
    """Three send_nowait Results: one DATA frame; an awaited send after them follows in its own."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, sess = await opened(peer)
            frames: list[int] = []
            on_data = sess._on_data

            def counting(data: bytes, flow_len: int) -> None:
                frames.append(len(data))
                on_data(data, flow_len)

            sess._on_data = counting  # type: ignore[method-assign]
            async with stream:
                for task_id in ("a", "b", "c"):
                    stream.send_nowait(_result(task_id))
                await stream.send(_result("d"))  # queued after them, not before
                got = [await sess.recv() for _ in range(4)]
                assert [m.result.task_id for m in got if m is not None] == ["a", "b", "c", "d"]
                assert len(frames) == 2
                assert stream.messages_sent == 5  # the Hello too

    asyncio.run(main())


def test_send_nowait_refuses_an_oversized_message_at_once() -> None:
    """The size limit is still checked per message, when send_nowait is called."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, sess = await opened(peer, max_message=64)
            async with stream:
                with pytest.raises(ResourceExhausted):
                    stream.send_nowait(_result("x" * 100))
                stream.send_nowait(_result("ok"))
                got = await sess.recv()
                assert got is not None and got.result.task_id == "ok"

    asyncio.run(main())
