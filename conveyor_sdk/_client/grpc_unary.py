"""gRPC unary framing for :class:`~conveyor_sdk._client.unary.UnaryStub` (binary proto or JSON).

It frames and reads as connectrpc's gRPC client does (``tests/sdk_client/test_unary_parity.py``
compares the two on the same answers):

* request headers: ``content-type: application/grpc+<codec>``, ``te: trailers``,
  ``grpc-accept-encoding: gzip``, ``grpc-timeout`` when the call has a deadline (in the largest
  unit that keeps it under 8 digits, as the spec asks), then the client's own headers;
* the body is one length-prefixed message (5 bytes: flags, big-endian length);
* a 200 answer must be ``application/grpc`` or ``application/grpc+<codec>``; its messages are
  read in order (a compressed one needs ``grpc-encoding: gzip``), then ``grpc-status`` from the
  trailers, or from the headers of a trailers-only answer; a non-zero status is the error
  (``grpc-status-details-bin`` first, else ``grpc-message``, percent-decoded); a unary answer
  with no message or two is ``unimplemented``;
* any other HTTP status is read as a Connect JSON error body, or from the status alone.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
import zlib
from collections.abc import Sequence
from typing import Any

from google.protobuf.message import Message  # type: ignore[import-untyped]  # protobuf ships no stubs

from conveyor_sdk._client.connect_unary import error_from_json
from conveyor_sdk._client.h2transport import MAX_INFLATED
from conveyor_sdk._client.unary import Exchange, MessageCodec, header, user_agent, wire_error
from conveyor_sdk.errors import Code, ConveyorError

__all__ = ["GrpcWire", "grpc_timeout"]

_OWN = frozenset({"content-type", "te", "grpc-accept-encoding", "grpc-encoding", "grpc-timeout"})
_TIMEOUT_UNITS = ((1, "m"), (1000, "S"), (60_000, "M"), (3_600_000, "H"))
_BY_STATUS = {str(code.grpc): code for code in Code}


def grpc_timeout(timeout_ms: int) -> str:
    """``grpc-timeout`` for ``timeout_ms``: at most 8 digits, in the finest unit that fits."""
    if timeout_ms <= 0:
        return "0n"
    for size, unit in _TIMEOUT_UNITS:
        if timeout_ms // size < 100_000_000:
            return f"{timeout_ms // size}{unit}"
    return f"{timeout_ms // 3_600_000}H"


class GrpcWire:
    """gRPC over HTTP/2 with one codec: enveloped messages, status in trailers."""

    __slots__ = ("_media", "_static", "codec")

    def __init__(self, codec: MessageCodec) -> None:
        self.codec = codec
        self._media = f"application/grpc+{codec.name}"
        self._static = (("content-type", self._media), ("te", "trailers"), ("grpc-accept-encoding", "gzip"))

    def request_fields(
        self, user: tuple[tuple[str, str], ...], timeout_ms: int | None
    ) -> tuple[tuple[str, str], ...]:
        timed = () if timeout_ms is None else (("grpc-timeout", grpc_timeout(timeout_ms)),)
        own = tuple((k, v) for k, v in user if k.lower() not in _OWN)
        return (*timed, *self._static, *user_agent(own), *own)

    def frame(self, message: bytes) -> bytes:
        return b"\0" + len(message).to_bytes(4, "big") + message

    def read(self, answer: Exchange, output: type[Message]) -> Any:
        if answer.status != 200:
            raise _http_error(answer)
        self._check_media(header(answer.headers, "content-type"))
        gzip = _compressed(header(answer.headers, "grpc-encoding"))
        messages = [self.codec.decode(data, output) for data in _envelopes(answer.body, gzip)]
        _raise_status(answer)
        if not messages:
            raise wire_error(Code.UNIMPLEMENTED, "unary response has zero messages")
        return messages[0]

    def _check_media(self, media: str) -> None:
        if media == "application/grpc" or media.startswith("application/grpc+"):
            name = media[len("application/grpc+") :] if "+" in media else "proto"
            if name == self.codec.name:
                return
            code = Code.INTERNAL
        else:
            code = Code.UNKNOWN
        raise wire_error(code, f"invalid content-type: '{media}'; expecting '{self._media}'")


def _http_error(answer: Exchange) -> ConveyorError:
    """A gRPC call answered with another HTTP status: its JSON body if any, else the status."""
    try:
        data = json.loads(answer.body)
    except ValueError:
        data = None
    return error_from_json(data, answer.status)


def _compressed(encoding: str) -> bool:
    if encoding in ("", "identity"):
        return False
    if encoding == "gzip":
        return True
    raise wire_error(Code.INTERNAL, f"unknown encoding '{encoding}'; accepted encodings are gzip, identity")


def _envelopes(body: bytes, gzip: bool) -> list[bytes]:
    """The messages of a unary answer's body (two or more: ``unimplemented``)."""
    out: list[bytes] = []
    at, size = 0, len(body)
    while at < size:
        if size - at < 5:
            raise wire_error(Code.INTERNAL, "protocol error: incomplete envelope: unexpected EOF")
        flags, length = body[at], int.from_bytes(body[at + 1 : at + 5], "big")
        if flags & ~1:
            raise wire_error(Code.INTERNAL, "protocol error: invalid envelope flags")
        if size - at - 5 < length:
            got = size - at - 5
            raise wire_error(
                Code.INTERNAL,
                f"protocol error: promised {length} bytes in enveloped message, got {got} bytes",
            )
        data = body[at + 5 : at + 5 + length]
        at += 5 + length
        if flags & 1:
            if not gzip:
                raise wire_error(
                    Code.INTERNAL, "protocol error: sent compressed message without compression support"
                )
            data = _gunzip(data)
        if out:
            raise wire_error(Code.UNIMPLEMENTED, "unary response has multiple messages")
        out.append(data)
    return out


def _gunzip(data: bytes) -> bytes:
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data, MAX_INFLATED + 1)
    except zlib.error as exc:
        raise wire_error(Code.INVALID_ARGUMENT, f"decompress: {exc}") from None
    if len(out) > MAX_INFLATED or inflater.unconsumed_tail:
        raise wire_error(Code.RESOURCE_EXHAUSTED, f"message inflates beyond {MAX_INFLATED} bytes")
    if not inflater.eof:
        raise wire_error(Code.INVALID_ARGUMENT, "decompress: truncated gzip message")
    return out


def _raise_status(answer: Exchange) -> None:
    """Raise the error ``grpc-status`` names (trailers, or the headers of a trailers-only answer)."""
    fields: Sequence[tuple[str, str]] = answer.trailers
    status = header(fields, "grpc-status")
    if not status:
        if answer.body:  # a message without a status: the trailers are missing
            raise wire_error(Code.INTERNAL, "missing grpc-status trailer")
        fields = answer.headers
        status = header(fields, "grpc-status")
        if not status:
            raise wire_error(Code.INTERNAL, "missing grpc-status trailer")
    if status == "0":
        return
    details = header(fields, "grpc-status-details-bin")
    if details:
        number, message = _status_proto(base64.b64decode(details + "==="))
        raise wire_error(_BY_STATUS.get(str(number), Code.UNKNOWN), message)
    message = urllib.parse.unquote(header(fields, "grpc-message"))
    raise wire_error(_BY_STATUS.get(status, Code.UNKNOWN), message)


def _status_proto(data: bytes) -> tuple[int, str]:
    """``code`` (field 1) and ``message`` (field 2) of a ``google.rpc.Status``; details are skipped."""
    code, message, at = 0, "", 0
    try:
        while at < len(data):
            key, at = _varint(data, at)
            kind = key & 7
            if kind == 0:
                value, at = _varint(data, at)
                if key >> 3 == 1:
                    code = value
            elif kind == 2:
                length, at = _varint(data, at)
                if key >> 3 == 2:
                    message = data[at : at + length].decode()
                at += length
            else:
                raise ValueError(f"wire type {kind}")
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise wire_error(Code.INTERNAL, f"malformed grpc-status-details-bin: {exc}") from None
    return code, message


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
