"""One scripted server-side session stream (see :class:`PeerSession`)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Literal, Protocol

import h2.connection
from google.protobuf import json_format  # type: ignore[import-untyped]  # protobuf ships no stubs
from google.protobuf.message import Message  # type: ignore[import-untyped]
from h2.errors import ErrorCodes

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._protocol.framing import (
    FLAG_END_STREAM,
    FrameDecoder,
    connect_end_stream_payload,
    encode_frame,
    grpc_message_encode,
)
from conveyor_sdk._transport.signal import Signal
from conveyor_sdk.errors import Code, error_for_code

__all__ = ["PeerConn", "PeerSession", "wire_format"]


class PeerConn(Protocol):
    """What a stream uses of its connection (``PeerConnection`` is one; a protocol, so this
    module does not import the module that imports it)."""

    h2: h2.connection.H2Connection
    signal: Signal
    closed: bool

    async def flush(self) -> None: ...

    def ack(self, stream_id: int, size: int) -> None: ...

    async def send_data(self, stream_id: int, data: bytes, end_stream: bool) -> None: ...

    async def ping(self, timeout: float) -> None: ...  # noqa: ASYNC109  # mirrors PeerConnection.ping


CONTENT_TYPES = {"grpc": "application/grpc", "connect": "application/connect+proto"}

Codec = Literal["proto", "json"]


def wire_format(headers: dict[str, str], forced: str) -> tuple[str, Codec]:
    """The (protocol, codec) to answer a stream in: the client's own, unless ``forced``.

    ``application/grpc`` / ``application/grpc+proto`` / ``+json`` is gRPC;
    ``application/connect+proto`` / ``+json`` is Connect streaming. An unknown content
    type is answered in gRPC (binary proto) so the client sees a well-formed error end.
    """
    if forced != "auto":
        return forced, "proto"
    ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    base, _, suffix = ctype.partition("+")
    codec: Codec = "json" if suffix == "json" else "proto"
    if base == "application/connect":
        return "connect", codec
    return "grpc", codec if base == "application/grpc" else "proto"


class PeerSession:
    """The server end of one session stream opened by the client under test.

    Attributes:
        headers: the request headers (lower-case names; pseudo-headers included).
        protocol: ``"grpc"`` or ``"connect"``: the protocol this stream is answered in
            (the client's own unless the peer was created with a fixed protocol).
        codec: ``"proto"`` or ``"json"``: how messages are encoded both ways.
        content_type: the request's ``content-type`` header as sent by the client.
        opened_at: event-loop time at which the request headers arrived.
        stream_id: the HTTP/2 stream id.
        client_half_closed: True once the client sent END_STREAM.
        client_reset: the RST_STREAM error code the client sent, or None.
    """

    def __init__(self, conn: PeerConn, stream_id: int, headers: dict[str, str], protocol: str) -> None:
        self._conn = conn
        self.stream_id = stream_id
        self.headers = headers
        self.content_type = headers.get("content-type", "")
        self.opened_at = asyncio.get_running_loop().time()  # when the request HEADERS arrived
        self.protocol, self.codec = wire_format(headers, protocol)
        self.client_half_closed = False
        self.client_reset: int | None = None
        self.headers_sent = False
        self.ended = False
        self._decoder = FrameDecoder(max_message=1 << 30)
        self._inbox: deque[bytes] = deque()
        self._unacked = 0
        self._queued = 0
        self.recv_high_water = 64 * 1024

    def __repr__(self) -> str:
        return f"<PeerSession stream={self.stream_id} unread={len(self._inbox)} ended={self.ended}>"

    # ---- reading ---------------------------------------------------------------------------------

    async def recv_raw(self, timeout: float = 10.0) -> bytes | None:  # noqa: ASYNC109  # per-call timeouts are the documented test API
        """Next raw message from the client; None once it half-closed (or reset) with nothing queued."""
        async with asyncio.timeout(timeout):
            while not self._inbox:
                if self.client_half_closed or self.client_reset is not None or self._conn.closed:
                    return None
                await self._conn.signal.wait()
        data = self._inbox.popleft()
        self._queued -= len(data) + 5
        self._maybe_ack()
        return data

    async def recv(self, timeout: float = 10.0) -> pb.WorkerMessage | None:  # noqa: ASYNC109  # per-call timeouts are the documented test API
        """Next ``WorkerMessage``; None once the client half-closed. Raises TimeoutError."""
        data = await self.recv_raw(timeout)
        if data is None:
            return None
        return self._decode(data, pb.WorkerMessage())

    def _decode(self, data: bytes, msg: pb.WorkerMessage) -> pb.WorkerMessage:
        if self.codec == "json":
            json_format.Parse(data, msg, ignore_unknown_fields=True)
        else:
            msg.ParseFromString(data)
        return msg

    def encode(self, msg: Message) -> bytes:
        """``msg`` encoded in this stream's codec (binary proto or proto3 JSON)."""
        if self.codec == "json":
            text: str = json_format.MessageToJson(msg, indent=None)
            return text.encode()
        data: bytes = msg.SerializeToString()
        return data

    async def wait_closed_by_client(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109  # per-call timeouts are the documented test API
        """Wait until the client half-closed or reset the stream."""
        async with asyncio.timeout(timeout):
            while not (self.client_half_closed or self.client_reset is not None or self._conn.closed):
                await self._conn.signal.wait()

    @property
    def unread(self) -> int:
        """Complete client messages received but not yet read by the script."""
        return len(self._inbox)

    # ---- writing ---------------------------------------------------------------------------------

    async def send_headers(self, extra: tuple[tuple[str, str], ...] = (), status: int = 200) -> None:
        """Send the response HEADERS now (``send``/``end`` do it implicitly)."""
        if self.headers_sent:
            return
        self.headers_sent = True
        if not any(name == "content-type" for name, _ in extra):
            extra = (("content-type", self.response_content_type), *extra)
        headers = [(":status", str(status)), *extra]
        self._conn.h2.send_headers(self.stream_id, headers)
        await self._conn.flush()

    @property
    def response_content_type(self) -> str:
        """The ``content-type`` this stream answers with (matches the request's protocol and codec)."""
        if self.protocol == "connect":
            return f"application/connect+{self.codec}"
        return CONTENT_TYPES["grpc"] if self.codec == "proto" else "application/grpc+json"

    async def send(self, msg: pb.ServerMessage) -> None:
        """Send one ``ServerMessage`` in the stream's codec (waits for flow-control window as needed)."""
        await self.send_raw(self.encode(msg))

    async def send_raw(self, data: bytes, *, framed: bool = False, end_stream: bool = False) -> None:
        """Send raw message bytes; ``framed=True`` sends ``data`` verbatim as DATA."""
        await self.send_headers()
        await self._conn.send_data(self.stream_id, data if framed else encode_frame(data), end_stream)
        self.ended = self.ended or end_stream

    async def end(self, code: Code | None = None, message: str = "") -> None:
        """Finish the stream: gRPC trailers / Connect end-of-stream message. ``code=None`` means OK.

        This is the only way the peer closes its send side in an orderly way: a client's
        half-close alone never ends the stream, so a script may keep sending after it.
        """
        if self.ended:
            return
        if self.protocol == "connect":
            err = None if code is None else error_for_code(code, message)
            payload = encode_frame(connect_end_stream_payload(err), flags=FLAG_END_STREAM)
            await self.send_raw(payload, framed=True, end_stream=True)
            return
        trailers = [("grpc-status", str(code.grpc if code else 0))]
        if message:
            trailers.append(("grpc-message", grpc_message_encode(message)))
        if not self.headers_sent:  # Trailers-Only response
            self.headers_sent = True
            headers = [(":status", "200"), ("content-type", self.response_content_type), *trailers]
            self._conn.h2.send_headers(self.stream_id, headers, end_stream=True)
        else:
            self._conn.h2.send_headers(self.stream_id, trailers, end_stream=True)
        self.ended = True
        await self._conn.flush()

    async def reset(self, error_code: int = ErrorCodes.CANCEL) -> None:
        """Abort the stream with RST_STREAM (default CANCEL)."""
        self.ended = True
        self._conn.h2.reset_stream(self.stream_id, error_code)
        await self._conn.flush()

    async def ping(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109  # per-call timeouts are the documented test API
        """Send a PING on this session's connection and wait for the client's ACK."""
        await self._conn.ping(timeout)

    # ---- fed by the connection -------------------------------------------------------------------

    def _on_data(self, data: bytes, flow_len: int) -> None:
        self._unacked += flow_len
        for frame in self._decoder.feed(data):
            self._inbox.append(frame.data)
            self._queued += len(frame.data) + 5
        self._maybe_ack()

    def _maybe_ack(self) -> None:
        if self._unacked and self._queued <= self.recv_high_water and not self._conn.closed:
            self._conn.ack(self.stream_id, self._unacked)
            self._unacked = 0
