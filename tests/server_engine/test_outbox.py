"""The session Outbox: frames go straight to the stream when nothing is queued, and never overtake."""

from __future__ import annotations

import asyncio

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_server_min._services.session import Outbox


def _ping(n: int) -> pb.ServerMessage:
    """A frame told apart by its number (a Cancel naming task ``n``)."""
    msg = pb.ServerMessage()
    msg.cancel.task_id = str(n)
    return msg


def test_push_goes_out_at_once_while_the_stream_has_room() -> None:
    """With room on the stream, push hands the frame over synchronously (no writer turn)."""
    sent: list[int] = []

    def nowait(msg: pb.ServerMessage, urgent: bool) -> bool:
        sent.append(int(msg.cancel.task_id))
        return True

    async def main() -> None:
        box = Outbox(nowait)
        box.push(_ping(1))
        box.push(_ping(2))
        assert sent == [1, 2]  # before any await: the same event-loop turn

    asyncio.run(main())


def test_queued_frames_keep_their_order_when_the_stream_is_full() -> None:
    """Once one frame had to queue, later frames queue behind it even if the stream has room again."""
    order: list[int] = []
    room = [False]

    def nowait(msg: pb.ServerMessage, urgent: bool) -> bool:
        if room[0]:
            order.append(int(msg.cancel.task_id))
        return room[0]

    both_sent = asyncio.Event()

    async def send(msg: pb.ServerMessage) -> None:
        order.append(int(msg.cancel.task_id))
        if len(order) == 2:
            both_sent.set()

    async def main() -> None:
        box = Outbox(nowait)
        box.push(_ping(1))  # stream full: queued
        room[0] = True
        box.push(_ping(2))  # must not overtake 1
        assert order == []
        writer = asyncio.create_task(box.drain(send))
        await asyncio.wait_for(both_sent.wait(), 5)
        box.push(_ping(3))  # queue empty again: straight out
        assert order == [1, 2, 3]
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)

    asyncio.run(main())
