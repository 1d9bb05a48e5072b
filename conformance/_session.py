"""A raw worker session for server checks: frames in, frames out, through the SDK transport.

No SDK worker logic sits in the way: the check decides every frame. A reader
task pumps server frames into a queue so ``recv`` can time out without
cancelling the transport's own read.

Frames that arrive before the Welcome (upstream conveyord can send a Dispatch
first, server-behavior.md §15.8) are kept by ``hello`` and handed to the check
after it, in arrival order, and listed in ``early_frames``. Only the check that
judges frame order (``server.5.3.welcome-before-any-dispatch``) looks at that
list, so one server deviation fails one check, not every check that enqueues
before it says Hello.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conveyor_conformance.model import CheckFailed
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import ConveyorError, Internal

__all__ = ["RawSession", "StreamEnded", "open_raw_session"]

_END = object()
_HOLD_BEAT = 0.3  # s between Heartbeats of tasks held through quiet(): the suite's 2 s lease asks for 0.67 s


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """How the server ended the stream: ``error`` is None for a clean end."""

    error: ConveyorError | None


async def open_raw_session(
    url: str, token: str | None, protocol: str = "grpc", ca_file: str | None = None
) -> RawSession:
    """Open a Session stream with the SDK transport (no frames sent yet); ``ca_file`` = trusted CAs."""
    from conveyor_sdk._transport import TLSOptions, TransportOptions, open_session

    tls = TLSOptions(ca_file=ca_file) if ca_file else None
    opts = TransportOptions(token=token, protocol=protocol, tls=tls)  # type: ignore[arg-type]  # CLI-validated
    stream: Any = open_session(url, opts)
    if inspect.isawaitable(stream):
        stream = await stream
    return RawSession(stream)


class RawSession:
    """One bidirectional stream driven frame by frame."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._frames: asyncio.Queue[object] = asyncio.Queue()
        self._reader = asyncio.get_running_loop().create_task(self._pump(), name="conformance-session-reader")
        self._held: deque[pb.ServerMessage] = deque()  # kept pre-Welcome frames, delivered first
        self.early_frames: list[pb.ServerMessage] = []  # what arrived before the Welcome
        self.ended: StreamEnded | None = None
        self.sent_close = False

    def __repr__(self) -> str:
        held = len(self._held)
        return f"<RawSession ended={self.ended} queued={self._frames.qsize()} held={held}>"

    async def _pump(self) -> None:
        error: ConveyorError | None = None
        try:
            while True:
                msg = await self._stream.recv()
                if msg is None:
                    break
                self._frames.put_nowait(msg)
        except ConveyorError as exc:
            error = exc
        except Exception as exc:  # a foreign exception from the transport is itself a finding
            error = Internal(f"transport raised {type(exc).__name__}: {exc}")
        self._frames.put_nowait(StreamEnded(error))

    # --- sending ----------------------------------------------------------------------------

    async def send(self, msg: pb.WorkerMessage) -> None:
        """Send one WorkerMessage."""
        await _maybe_await(self._stream.send(msg))

    async def send_raw(self, data: bytes) -> None:
        """Send raw protobuf bytes as one message frame."""
        await _maybe_await(self._stream.send_raw(data))

    async def hello(
        self, queues: dict[str, int], concurrency: int = 1, *, within: float = 10.0, **fields: Any
    ) -> pb.Welcome:
        """Send Hello and return the Welcome; frames before it are kept for later ``recv`` calls.

        CheckFailed when no Welcome arrives within ``within`` or the stream ends first.
        """
        fields.setdefault("sdk_version", "conveyor-conformance/0.1.0")
        await self.send(pb.WorkerMessage(hello=pb.Hello(queues=queues, concurrency=concurrency, **fields)))
        loop = asyncio.get_running_loop()
        end = loop.time() + within
        early: list[pb.ServerMessage] = []
        while True:
            item = await self._next(max(0.0, end - loop.time()))
            if item is None:
                self._held.extend(early)
                raise CheckFailed(f"no welcome frame within {within:g}s")
            if isinstance(item, StreamEnded):
                raise CheckFailed(f"stream ended ({_describe_end(item)}) while waiting for welcome")
            if item.WhichOneof("frame") == "welcome":
                self.early_frames.extend(early)
                self._held.extend(early)
                return item.welcome
            early.append(item)

    async def result(self, task_id: str, outcome: int, error_msg: str = "", result: bytes = b"") -> None:
        """Send one Result frame."""
        res = pb.Result(task_id=task_id, outcome=outcome, error_msg=error_msg, result=result)  # type: ignore[arg-type]
        await self.send(pb.WorkerMessage(result=res))

    async def heartbeat(self, ids: list[str]) -> None:
        """Send one Heartbeat listing ``ids``."""
        await self.send(pb.WorkerMessage(heartbeat=pb.Heartbeat(active_task_ids=ids)))

    async def close_send(self) -> None:
        """Half-close the request side (graceful end)."""
        if not self.sent_close:
            self.sent_close = True
            await _maybe_await(self._stream.close_send())

    # --- receiving --------------------------------------------------------------------------

    async def recv(self, within: float) -> pb.ServerMessage | StreamEnded | None:
        """Next server frame, a StreamEnded, or None when nothing arrived within ``within``."""
        if self._held:
            return self._held.popleft()
        return await self._next(within)

    async def _next(self, within: float) -> pb.ServerMessage | StreamEnded | None:
        """Next frame off the wire (held frames not included)."""
        if self.ended is not None:
            return self.ended
        try:
            item = await asyncio.wait_for(self._frames.get(), within)
        except TimeoutError:
            return None
        if isinstance(item, StreamEnded):
            self.ended = item
            return item
        assert isinstance(item, pb.ServerMessage)
        return item

    async def expect(
        self, kind: str, within: float = 10.0, *, skip: tuple[str, ...] = ("ping",)
    ) -> pb.ServerMessage:
        """Next frame must be ``kind`` (frames in ``skip`` are ignored)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + within
        while True:
            item = await self.recv(max(0.0, end - loop.time()))
            if item is None:
                raise CheckFailed(f"no {kind} frame within {within:g}s")
            if isinstance(item, StreamEnded):
                raise CheckFailed(f"stream ended ({_describe_end(item)}) while waiting for {kind}")
            got = item.WhichOneof("frame")
            if got in skip:
                continue
            if got != kind:
                raise CheckFailed(f"expected {kind}, got {got}: {_short(item)}")
            return item

    async def expect_end(self, within: float = 10.0) -> StreamEnded:
        """Wait for the stream to end; frames arriving meanwhile are discarded."""
        loop = asyncio.get_running_loop()
        end = loop.time() + within
        while True:
            item = await self.recv(max(0.0, end - loop.time()))
            if item is None:
                raise CheckFailed(f"stream did not end within {within:g}s")
            if isinstance(item, StreamEnded):
                return item

    async def expect_error(self, within: float = 10.0, *, allow_frames: bool = False) -> ConveyorError:
        """The stream must end with an error (before any frame unless ``allow_frames``)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + within
        while True:
            item = await self.recv(max(0.0, end - loop.time()))
            if item is None:
                raise CheckFailed(f"stream still open {within:g}s later; expected an error")
            if isinstance(item, StreamEnded):
                if item.error is None:
                    raise CheckFailed("stream ended cleanly; expected an error status")
                return item.error
            if not allow_frames:
                raise CheckFailed(f"expected the stream to fail, got {item.WhichOneof('frame')} frame")

    async def quiet(
        self,
        duration: float,
        kinds: tuple[str, ...] = ("dispatch", "batch_dispatch"),
        *,
        holding: Sequence[str] = (),
    ) -> None:
        """Assert that no frame of ``kinds`` arrives within ``duration`` seconds.

        ``holding`` names the tasks this session holds: they are heartbeated every 0.3 s meanwhile, as a
        worker would, so the wait never looks like a silent session (which a server may close).
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + duration
        beat_at = loop.time()
        while (left := end - loop.time()) > 0:
            if holding and loop.time() >= beat_at:
                await self.heartbeat(list(holding))
                beat_at = loop.time() + _HOLD_BEAT
            item = await self.recv(min(left, beat_at - loop.time()) if holding else left)
            if item is None:
                continue  # the loop's condition ends the wait once ``duration`` is over
            if isinstance(item, StreamEnded):
                raise CheckFailed(f"stream ended unexpectedly ({_describe_end(item)})")
            if item.WhichOneof("frame") in kinds:
                raise CheckFailed(f"unexpected {item.WhichOneof('frame')}: {_short(item)}")

    async def abort(self) -> None:
        """End the stream abruptly (no half-close): the transport's aclose without close_send."""
        self.sent_close = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(_maybe_await(self._stream.aclose()), 5)

    async def aclose(self) -> None:
        """Close the stream and stop the reader (idempotent, never raises)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.close_send(), 2)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(_maybe_await(self._stream.aclose()), 5)
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _describe_end(item: StreamEnded) -> str:
    if item.error is None:
        return "clean end"
    return f"{item.error.code.connect_name}: {item.error.message}"


def _short(msg: pb.ServerMessage) -> str:
    text = str(msg).replace("\n", " ")
    return text[:160]
