"""HTTP/2 building blocks: the stream object handlers see (a CallIO) and its owner's protocol."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Protocol

from conveyor_sdk.errors import Canceled, DeadlineExceeded, ResourceExhausted

__all__ = ["BODY_BUDGET", "HIGH_WATER", "H2Stream", "StreamOwner", "header_dict"]

HIGH_WATER = 256 * 1024  # a writer waits when its stream buffer holds more than this
# Request bytes a connection may have handed to handlers that have not answered yet (unary bodies
# are collected whole, up to the message limit each): bounds what many parallel uploads can pin.
BODY_BUDGET = 64 << 20


class StreamOwner(Protocol):
    """What a stream uses of its connection (``h2conn.H2Connection`` is one; a protocol, so this
    module does not import the module that imports it)."""

    peer: str
    held_bytes: int

    def ack(self, stream_id: int, flow: int) -> None: ...

    def send_headers(self, st: H2Stream, headers: list[tuple[str, str]], end: bool) -> None: ...

    def mark_ready(self, st: H2Stream) -> None: ...

    def flush_now(self, st: H2Stream) -> None: ...

    def send_whole(self, st: H2Stream, content_type: str, body: bytes) -> bool: ...


class H2Stream:
    """One request stream: the handler's view (CallIO) plus buffers."""

    __slots__ = (
        "_conn",
        "_drained",
        "_readable",
        "chunks",
        "end_pending",
        "ended_in",
        "finished",
        "headers",
        "held",
        "http2",
        "id",
        "method",
        "out",
        "path",
        "peer",
        "query",
        "reset",
        "taken",
        "task",
        "trailers",
    )

    def __init__(self, conn: StreamOwner, stream_id: int, headers: dict[str, str]) -> None:
        self._conn = conn
        self.id = stream_id
        self.headers = headers
        self.method = headers.get(":method", "")
        self.path, _, self.query = headers.get(":path", "").partition("?")
        self.peer = conn.peer
        self.http2 = True
        self.chunks: deque[tuple[bytes, int]] = deque()
        self.ended_in = False
        self.reset = False
        self.out = bytearray()
        self.end_pending = False
        self.finished = False
        self.held = 0  # request bytes handed to the handler before it answered (see BODY_BUDGET)
        self.trailers: list[tuple[str, str]] | None = None
        self.task: asyncio.Task[None] | None = None
        # The request's header list and body while h2 has no stream for it (see H2Connection._serve_taken).
        self.taken: tuple[Any, bytes] | None = None
        self._readable: asyncio.Future[Any] | None = None
        self._drained: asyncio.Future[None] | None = None

    # ---- CallIO -------------------------------------------------------------------------------
    async def read_chunk(self, max_wait: float | None = None) -> bytes | None:
        while not self.chunks:
            if self.ended_in:
                return None
            if self.reset:
                raise Canceled("stream reset by the client")
            loop = asyncio.get_running_loop()
            self._readable = fut = loop.create_future()
            if max_wait is None:
                await fut
                continue
            timer = loop.call_later(max_wait, _expire, fut)
            try:
                await fut
            finally:
                timer.cancel()
            if fut.result() is _EXPIRED:
                raise DeadlineExceeded(f"request stalled: no data from the client for {max_wait:g}s")
        data, flow = self.chunks.popleft()
        conn = self._conn
        conn.ack(self.id, flow)
        if self.held >= 0:  # still collecting a request: count it against the connection budget
            self.held += len(data)
            conn.held_bytes += len(data)
            if conn.held_bytes > BODY_BUDGET:
                raise ResourceExhausted(
                    f"more than {BODY_BUDGET >> 20} MiB of unanswered request data on this connection"
                )
        return data

    def release(self) -> None:
        """Stop counting this stream's request bytes (it answered, or it is gone)."""
        if self.held > 0:
            self._conn.held_bytes -= self.held
        self.held = -1

    def respond(self, status: int, headers: list[tuple[str, str]], *, end: bool = False) -> None:
        self.release()
        if self.reset:
            return
        self._conn.send_headers(self, [(":status", str(status)), *headers], end)
        if end:
            self.finished = True

    async def write(self, data: bytes) -> None:
        if self.reset:
            raise Canceled("stream reset by the client")
        self.out += data
        self._conn.mark_ready(self)
        while len(self.out) > HIGH_WATER and not self.reset:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        if self.reset:
            raise Canceled("stream reset by the client")

    def write_nowait(self, data: bytes) -> None:
        if not self.reset:
            self.out += data
            self._conn.mark_ready(self)

    def try_write(self, data: bytes, *, urgent: bool = False) -> bool:
        if self.reset or len(self.out) > HIGH_WATER:
            return False
        self.out += data
        if urgent:
            self._conn.flush_now(self)
        else:
            self._conn.mark_ready(self)
        return True

    def respond_whole(self, content_type: str, body: bytes) -> bool:
        if self.reset or self.finished or self.out or not self.ended_in:
            return False
        if not self._conn.send_whole(self, content_type, body):
            return False
        self.release()
        self.finished = True
        return True

    def finish(self, trailers: list[tuple[str, str]] | None = None) -> None:
        if self.finished or self.reset:
            return
        self.finished = True
        self.end_pending = True
        self.trailers = trailers
        self._conn.mark_ready(self)

    # ---- connection side ----------------------------------------------------------------------
    def wake_reader(self) -> None:
        fut = self._readable
        if fut is not None and not fut.done():
            fut.set_result(None)

    def wake_writer(self) -> None:
        fut = self._drained
        if fut is not None and not fut.done():
            fut.set_result(None)


_EXPIRED = object()


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(_EXPIRED)


_MAX_NAMED = 128  # decoded header fields one connection remembers (then it starts again) ...
_MAX_NAMED_BYTES = 512  # ... each at most this long (name + value)


def header_dict(raw: Any, seen: dict[Any, tuple[str, str]] | None = None) -> dict[str, str]:
    """Request headers as text, lower-case names; repeated names joined with ``", "``.

    ``seen`` (one per connection) remembers decoded fields: a client repeats the same ones.
    """
    headers: dict[str, str] = {}
    for field in raw:
        decoded = seen.get(field) if seen is not None else None
        if decoded is None:
            decoded = _decode_field(field)
            if seen is not None and len(field[0]) + len(field[1]) <= _MAX_NAMED_BYTES:
                if len(seen) >= _MAX_NAMED:
                    seen.clear()
                seen[field] = decoded
        key, text = decoded
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def _decode_field(field: Any) -> tuple[str, str]:
    name, value = field
    key = name.decode("ascii", "replace").lower() if isinstance(name, bytes) else name.lower()
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return key, text
