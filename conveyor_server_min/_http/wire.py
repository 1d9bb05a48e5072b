"""Sans-I/O wire rules: content types, codecs, compression, message framing, status rendering.

Nothing here touches a socket or a clock. The call layer (``rpc.py``) asks
:func:`negotiate` which of the four wire formats a request speaks, decodes its
messages with a :class:`Codec` and a :class:`MessageDecoder`, and renders
errors as gRPC trailers, a Connect unary JSON body or a Connect end-of-stream
frame.

Wire formats served (all on every path):

=================  ==================================================  =========
format             request content types                               bodies
=================  ==================================================  =========
gRPC               application/grpc, application/grpc+proto|+json      framed
gRPC-Web           application/grpc-web, application/grpc-web+proto     framed
Connect unary      application/proto, application/json                 bare
Connect streaming  application/connect+proto, application/connect+json  framed
=================  ==================================================  =========
"""

from __future__ import annotations

import enum
import json
import re
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from conveyor_sdk._protocol.framing import connect_end_stream_payload, grpc_message_encode
from conveyor_sdk.errors import (
    ConveyorError,
    InvalidArgument,
    ProtocolError,
    ResourceExhausted,
    Unimplemented,
)

__all__ = [
    "JSON",
    "PROTO",
    "Codec",
    "MessageDecoder",
    "Negotiated",
    "Wire",
    "connect_end_frame",
    "connect_error_body",
    "decompress",
    "encode_message",
    "grpc_trailers",
    "grpc_web_trailer_frame",
    "negotiate",
    "parse_timeout",
]

FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02
FLAG_GRPC_WEB_TRAILER = 0x80
_HEADER = struct.Struct(">BI")


class Wire(enum.Enum):
    """The four wire formats ConnectRPC-compatible peers speak."""

    GRPC = "grpc"
    GRPC_WEB = "grpc-web"
    CONNECT_UNARY = "connect-unary"
    CONNECT_STREAM = "connect-stream"

    __hash__ = object.__hash__  # members are singletons: a dict keyed by them hashes in C

    @property
    def framed(self) -> bool:
        """Whether request and response bodies carry 5-byte length-prefixed messages."""
        return self is not Wire.CONNECT_UNARY

    @property
    def compression_header(self) -> str:
        """The request header naming the message compression."""
        return _COMPRESSION_HEADERS[self]


_COMPRESSION_HEADERS = {  # built once: read on every request
    Wire.GRPC: "grpc-encoding",
    Wire.GRPC_WEB: "grpc-encoding",
    Wire.CONNECT_UNARY: "content-encoding",
    Wire.CONNECT_STREAM: "connect-content-encoding",
}


class Codec:
    """Binary protobuf or proto3 JSON; decoding failures become ``invalid_argument``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def decode(self, data: bytes, cls: type[Message]) -> Message:
        """Parse ``data`` as a ``cls`` message."""
        if self.name == "proto":
            try:
                return cls.FromString(data)
            except (DecodeError, ValueError) as exc:  # ValueError: bad UTF-8 in a string field
                raise InvalidArgument(f"malformed protobuf {cls.DESCRIPTOR.name}: {exc}") from None
        msg = cls()
        try:
            json_format.Parse(data or b"{}", msg, ignore_unknown_fields=True)
        except (json_format.ParseError, ValueError, TypeError) as exc:
            raise InvalidArgument(f"malformed JSON {cls.DESCRIPTOR.name}: {exc}") from None
        return msg

    def encode(self, msg: Message) -> bytes:
        """Serialize ``msg``."""
        if self.name == "proto":
            data: bytes = msg.SerializeToString()
            return data
        return json.dumps(json_format.MessageToDict(msg), separators=(",", ":")).encode()


PROTO = Codec("proto")
JSON = Codec("json")


@dataclass(frozen=True, slots=True)
class Negotiated:
    """What a request speaks, and the content type to answer with."""

    wire: Wire
    codec: Codec
    content_type: str
    compression_header: str = field(init=False)  # ``wire.compression_header``, read on every call

    def __post_init__(self) -> None:
        object.__setattr__(self, "compression_header", self.wire.compression_header)


_CONTENT_TYPES: dict[str, Negotiated] = {}
for _wire, _prefix, _forms in (
    (Wire.GRPC, "application/grpc", ("", "+proto", "+json")),
    (Wire.GRPC_WEB, "application/grpc-web", ("", "+proto", "+json")),
    (Wire.CONNECT_STREAM, "application/connect", ("+proto", "+json")),
):
    for _form in _forms:
        _codec = JSON if _form == "+json" else PROTO
        _CONTENT_TYPES[_prefix + _form] = Negotiated(_wire, _codec, _prefix + _form)
_CONTENT_TYPES["application/proto"] = Negotiated(Wire.CONNECT_UNARY, PROTO, "application/proto")
_CONTENT_TYPES["application/json"] = Negotiated(Wire.CONNECT_UNARY, JSON, "application/json")


_SEEN_TYPES: dict[str, Negotiated] = {}  # content-type values as clients send them (a client repeats its own)
_MAX_SEEN_TYPES = 64


def negotiate(content_type: str | None) -> Negotiated | None:
    """The wire format of a request's ``content-type``; None when unsupported (answer 415)."""
    if not content_type:
        return None
    seen = _SEEN_TYPES.get(content_type)
    if seen is not None:
        return seen
    base = content_type.split(";", 1)[0].strip().lower()
    found = _CONTENT_TYPES.get(base)
    if found is not None and len(_SEEN_TYPES) < _MAX_SEEN_TYPES:
        _SEEN_TYPES[content_type] = found
    return found


def decompress(encoding: str | None, data: bytes, limit: int) -> bytes:
    """Undo ``gzip``/``identity`` compression, refusing output beyond ``limit`` bytes."""
    if not encoding or encoding == "identity":
        return data
    if encoding != "gzip":
        raise Unimplemented(f"unsupported compression {encoding!r}; supported: gzip, identity")
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise InvalidArgument(f"malformed gzip data: {exc}") from None
    if len(out) > limit:
        raise ResourceExhausted(f"decompressed message exceeds the limit of {limit} bytes")
    return out


def encode_message(data: bytes, flags: int = 0) -> bytes:
    """Length-prefix one message."""
    return _HEADER.pack(flags, len(data)) + data


class MessageDecoder:
    """Incremental 5-byte-prefix decoder that understands the compressed flag.

    ``feed`` returns ``(flags, payload)`` pairs with compression already undone.
    A message announcing more than ``max_message`` bytes raises
    :class:`ResourceExhausted` before its body is buffered.
    """

    __slots__ = ("_buf", "encoding", "max_message")

    def __init__(self, max_message: int, encoding: str | None = None) -> None:
        self._buf = b""
        self.max_message = max_message
        self.encoding = encoding

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message still buffered (non-zero at EOF = truncated)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Add bytes; return every complete message."""
        buf = self._buf + data if self._buf else data
        out: list[tuple[int, bytes]] = []
        offset, size = 0, len(buf)
        while size - offset >= 5:
            flags, length = _HEADER.unpack_from(buf, offset)
            if length > self.max_message:
                raise ResourceExhausted(
                    f"message of {length} bytes exceeds the limit of {self.max_message} bytes"
                )
            end = offset + 5 + length
            if end > size:
                break
            payload = buf[offset + 5 : end]
            if flags & FLAG_COMPRESSED:
                payload = self._inflate(payload)
            out.append((flags, payload))
            offset = end
        self._buf = buf[offset:] if offset < size else b""
        return out

    def _inflate(self, payload: bytes) -> bytes:
        if not self.encoding or self.encoding == "identity":
            raise ProtocolError("compressed message received but no compression was declared")
        return decompress(self.encoding, payload, self.max_message)


def grpc_trailers(error: ConveyorError | None) -> list[tuple[str, str]]:
    """``grpc-status`` / ``grpc-message`` for a finished call."""
    if error is None:
        return [("grpc-status", "0")]
    return [("grpc-status", str(error.code.grpc)), ("grpc-message", grpc_message_encode(error.message))]


def grpc_web_trailer_frame(error: ConveyorError | None) -> bytes:
    """gRPC-Web carries trailers as a final body frame flagged 0x80."""
    text = "".join(f"{k}: {v}\r\n" for k, v in grpc_trailers(error))
    return encode_message(text.encode(), FLAG_GRPC_WEB_TRAILER)


def connect_error_body(error: ConveyorError) -> bytes:
    """The Connect unary error body ``{"code", "message"}``."""
    body = {"code": error.code.connect_name, "message": error.message}
    return json.dumps(body, separators=(",", ":")).encode()


def connect_end_frame(error: ConveyorError | None) -> bytes:
    """The Connect streaming end-of-stream frame (flag 0x02)."""
    return encode_message(connect_end_stream_payload(error), FLAG_END_STREAM)


_GRPC_TIMEOUT = re.compile(r"^(\d{1,8})([HMSmun])$")
_GRPC_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


# Valid header values as clients send them (a client repeats its own), per header: "100" is a
# valid connect-timeout-ms but no valid grpc-timeout.
_SEEN_GRPC_TIMEOUTS: dict[str, float] = {}
_SEEN_CONNECT_TIMEOUTS: dict[str, float] = {}
_MAX_SEEN_TIMEOUTS = 64


def parse_timeout(wire: Wire, headers: Mapping[str, str]) -> float | None:
    """The caller's deadline in seconds (``grpc-timeout`` or ``connect-timeout-ms``), if any."""
    grpc = wire is Wire.GRPC or wire is Wire.GRPC_WEB
    raw = headers.get("grpc-timeout" if grpc else "connect-timeout-ms")
    if raw is None:
        return None
    known = _SEEN_GRPC_TIMEOUTS if grpc else _SEEN_CONNECT_TIMEOUTS
    seen = known.get(raw)
    if seen is not None:
        return seen
    if grpc:
        match = _GRPC_TIMEOUT.match(raw)
        if match is None:
            raise InvalidArgument(f"malformed grpc-timeout {raw!r}")
        seconds = int(match.group(1)) * _GRPC_UNITS[match.group(2)]
    else:
        if not raw.isdigit() or len(raw) > 10:
            raise InvalidArgument(f"malformed connect-timeout-ms {raw!r}")
        seconds = int(raw) / 1000.0
    if len(known) < _MAX_SEEN_TIMEOUTS:
        known[raw] = seconds
    return seconds
