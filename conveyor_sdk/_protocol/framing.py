"""Length-prefixed message framing shared by gRPC and Connect streaming.

Both protocols frame each message as ``flags:u8 | length:u32be | payload``.
gRPC uses flag bit 0 for compression; Connect streaming adds bit 1 (0x02) for
the end-of-stream message, whose payload is a JSON object carrying the error
and trailers. This module is sans-I/O: feed bytes in, get frames out.
"""

from __future__ import annotations

import json
import struct
import urllib.parse
from typing import Any, NamedTuple

from conveyor_sdk.errors import Code, ConveyorError, ProtocolError, ResourceExhausted, error_for_code

__all__ = [
    "FLAG_COMPRESSED",
    "FLAG_END_STREAM",
    "HEADER_SIZE",
    "Frame",
    "FrameDecoder",
    "connect_end_stream_payload",
    "encode_frame",
    "error_from_connect_end_stream",
    "error_from_grpc_trailers",
    "grpc_message_decode",
    "grpc_message_encode",
]

HEADER_SIZE = 5
FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02
DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024
_HEADER = struct.Struct(">BI")


class Frame(NamedTuple):
    """One decoded frame: its flag byte and payload (a tuple: one is built per message received)."""

    flags: int
    data: bytes

    @property
    def end_stream(self) -> bool:
        """True for a Connect end-of-stream frame."""
        return bool(self.flags & FLAG_END_STREAM)


def encode_frame(data: bytes, *, flags: int = 0) -> bytes:
    """Prefix ``data`` with the 5-byte header."""
    return _HEADER.pack(flags, len(data)) + data


class FrameDecoder:
    """Incremental decoder: ``feed(bytes)`` returns the complete frames so far.

    Raises :class:`ResourceExhausted` when a frame announces more than
    ``max_message`` bytes, and :class:`ProtocolError` for a compressed frame
    (we never negotiate compression). ``pending`` tells how many bytes of an
    incomplete frame are buffered, so a caller can detect truncation at EOF.
    """

    __slots__ = ("_buf", "max_message")

    def __init__(self, *, max_message: int = DEFAULT_MAX_MESSAGE) -> None:
        self._buf = bytearray()
        self.max_message = max_message

    @property
    def pending(self) -> int:
        """Bytes buffered that do not yet form a whole frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        """Add bytes; return every frame now complete, in order."""
        held = self._buf
        if held:
            held += data
            buf: bytes | bytearray = held
        else:  # nothing held back (the usual case): frames are cut from ``data`` itself
            buf = data
        frames: list[Frame] = []
        offset = 0
        size = len(buf)
        while size - offset >= HEADER_SIZE:
            flags, length = _HEADER.unpack_from(buf, offset)
            if length > self.max_message:
                raise ResourceExhausted(
                    f"message of {length} bytes exceeds the limit of {self.max_message} bytes"
                )
            if flags & FLAG_COMPRESSED:
                raise ProtocolError("compressed message received but no compression was negotiated")
            end = offset + HEADER_SIZE + length
            if size < end:
                break
            frames.append(Frame(flags, bytes(buf[offset + HEADER_SIZE : end])))
            offset = end
        if held:
            del held[:offset]
        elif offset < size:
            held += buf[offset:]
        return frames


_GRPC_MESSAGE_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if c != 0x25)


def grpc_message_encode(message: str) -> str:
    """Percent-encode a ``grpc-message`` trailer value (gRPC spec)."""
    return urllib.parse.quote(message, safe=_GRPC_MESSAGE_SAFE)


def grpc_message_decode(value: str) -> str:
    """Decode a percent-encoded ``grpc-message`` value; bad escapes pass through."""
    return urllib.parse.unquote(value, errors="replace")


def error_from_grpc_trailers(trailers: dict[str, str]) -> ConveyorError | None:
    """The error described by gRPC trailers, or None for ``grpc-status: 0``."""
    status = trailers.get("grpc-status")
    if status is None:
        return error_for_code(Code.INTERNAL, "response ended without a grpc-status trailer")
    try:
        number = int(status)
    except ValueError:
        return error_for_code(Code.INTERNAL, f"malformed grpc-status {status!r}")
    if number == 0:
        return None
    return error_for_code(Code.from_grpc(number), grpc_message_decode(trailers.get("grpc-message", "")))


def connect_end_stream_payload(
    error: ConveyorError | None, metadata: dict[str, list[str]] | None = None
) -> bytes:
    """JSON body of a Connect end-of-stream frame."""
    body: dict[str, Any] = {}
    if error is not None:
        body["error"] = {"code": error.code.connect_name, "message": error.message}
    if metadata:
        body["metadata"] = metadata
    return json.dumps(body, separators=(",", ":")).encode()


def error_from_connect_end_stream(data: bytes) -> ConveyorError | None:
    """The error in a Connect end-of-stream payload, or None for a clean end."""
    try:
        body = json.loads(data or b"{}")
    except ValueError:
        return error_for_code(Code.INTERNAL, "malformed Connect end-of-stream message")
    if not isinstance(body, dict):
        return error_for_code(Code.INTERNAL, "malformed Connect end-of-stream message")
    err = body.get("error")
    if not err:
        return None
    if not isinstance(err, dict):
        return error_for_code(Code.INTERNAL, "malformed Connect error object")
    return error_for_code(Code.from_connect(str(err.get("code", "unknown"))), str(err.get("message", "")))
