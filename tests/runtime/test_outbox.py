"""The pipe Outbox writes the first frame of a loop turn at once and the rest of the turn together."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

from conveyor_sdk._runtime.outbox import Outbox


@contextlib.asynccontextmanager
async def _pipe() -> AsyncIterator[tuple[asyncio.WriteTransport, int]]:
    """A pipe: the loop's write transport on one end, the non-blocking read fd of the other."""
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    loop = asyncio.get_running_loop()
    writer, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(wfd, "wb", 0))
    try:
        yield writer, rfd
    finally:
        writer.close()
        os.close(rfd)


def _readable(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return b""


async def _scenario() -> None:
    async with _pipe() as (writer, rfd):
        box = Outbox(lambda: writer)
        box.send(b"run1")
        assert _readable(rfd) == b"run1"  # written synchronously, in this very turn
        box.send(b"a")
        box.send(b"b")
        assert _readable(rfd) == b""  # coalesced until the turn ends
        await asyncio.sleep(0)
        assert _readable(rfd) == b"ab"
        box.send(b"run2")  # a new turn: at once again
        assert _readable(rfd) == b"run2"
        await asyncio.sleep(0)
        box.send(b"late")
        writer.close()
        box.send(b"dropped")  # a closed pipe is skipped, never raises
        box.flush()
        await asyncio.sleep(0)
        assert _readable(rfd) == b"late"


def test_first_frame_leaves_before_the_loop_turns() -> None:
    """A RunJob must not wait for the next iteration; later frames of the turn wait for one flush."""
    asyncio.run(_scenario())


async def _soon_scenario() -> None:
    async with _pipe() as (writer, rfd):
        box = Outbox(lambda: writer)
        box.send(b"busy1", soon=True)
        box.send(b"busy2", soon=True)
        assert _readable(rfd) == b""  # a busy child's RunJobs wait for the turn's end
        await asyncio.sleep(0)
        assert _readable(rfd) == b"busy1busy2"  # ... and leave in one write
        box.send(b"idle")  # the next turn's first urgent frame still leaves at once
        assert _readable(rfd) == b"idle"
        box.send(b"later", soon=True)
        await asyncio.sleep(0)
        assert _readable(rfd) == b"later"


def test_soon_frames_wait_for_the_turn_even_when_first() -> None:
    """Frames sent with soon=True (a busy child's RunJobs) leave together at the turn's end, not at once."""
    asyncio.run(_soon_scenario())
