"""Connect unary framing for :class:`~conveyor_sdk._client.unary.UnaryStub` (binary proto or JSON).

It frames and reads as connectrpc's client does (``tests/sdk_client/test_unary_parity.py`` compares
the two on the same answers):

* request headers: ``content-type: application/<codec>``, ``connect-protocol-version: 1``,
  ``connect-timeout-ms`` when the call has a deadline, ``accept-encoding: gzip,identity``,
  then the client's own headers (token, ``headers=``; a ``user-agent`` there replaces ours);
* a 200 answer must be ``application/<codec>`` (``unknown`` for another media type, ``internal``
  for another ``application/`` codec); a gzip body is inflated (up to ``h2transport.MAX_INFLATED`` bytes);
  a body that does not parse is ``invalid_argument`` ("unmarshal message: ...");
* any other status with an ``application/json`` body is the error it describes (an unknown code
  name reads as ``unavailable``, a missing one comes from the HTTP status); without a JSON body
  the HTTP status alone decides (400 internal, 401 unauthenticated, 403 permission denied,
  404 unimplemented, 429/502/503/504 unavailable, anything else unknown).

Errors are :class:`~conveyor_sdk.errors.ConveyorError`\\ s with the same class, message and
``details["connect_code"]`` that :func:`~conveyor_sdk._client.transport.translate` makes of
connectrpc's ``ConnectError``.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from google.protobuf.message import Message  # type: ignore[import-untyped]  # protobuf ships no stubs

from conveyor_sdk._client.h2transport import Inflater
from conveyor_sdk._client.unary import Exchange, MessageCodec, header, user_agent, wire_error
from conveyor_sdk.errors import Code, ConveyorError

__all__ = ["ConnectWire", "error_from_exchange", "error_from_json"]

_OWN = frozenset({"content-type", "connect-protocol-version", "accept-encoding", "connect-timeout-ms"})


class ConnectWire:
    """Connect unary with one codec: the body is the bare message, errors are JSON."""

    __slots__ = ("_media", "_plain", "_static", "codec")

    def __init__(self, codec: MessageCodec) -> None:
        self.codec = codec
        # The last header tuple a 200 answer carried with our media type and no content-encoding.
        # Our HTTP/2 transport hands every answer with the same header block the same (immutable)
        # tuple, so the checks below run once per distinct block, not once per call.
        self._plain: object = None
        self._media = f"application/{codec.name}"
        self._static = (
            ("content-type", self._media),
            ("connect-protocol-version", "1"),
            ("accept-encoding", "gzip,identity"),
        )

    def request_fields(
        self, user: tuple[tuple[str, str], ...], timeout_ms: int | None
    ) -> tuple[tuple[str, str], ...]:
        timed = () if timeout_ms is None else (("connect-timeout-ms", str(timeout_ms)),)
        own = tuple((k, v) for k, v in user if k.lower() not in _OWN)
        return (*timed, *self._static, *user_agent(own), *own)

    def frame(self, message: bytes) -> bytes:
        return message

    def read(self, answer: Exchange, output: type[Message]) -> Any:
        if answer.status != 200:
            raise error_from_exchange(answer)
        if answer.headers is self._plain:
            return self.codec.decode(answer.body, output)
        media = _media(answer)
        if media != self._media:
            code = Code.UNKNOWN if not media.startswith("application/") else Code.INTERNAL
            raise wire_error(code, f"invalid content-type: '{media}'; expecting '{self._media}'")
        if type(answer.headers) is tuple and header(answer.headers, "content-encoding") in ("", "identity"):
            self._plain = answer.headers
        return self.codec.decode(_inflate(answer), output)


def _media(answer: Exchange) -> str:
    return header(answer.headers, "content-type").partition(";")[0].strip().lower()


def _inflate(answer: Exchange) -> bytes:
    encoding = header(answer.headers, "content-encoding")
    if encoding in ("", "identity"):
        return answer.body
    if encoding != "gzip":
        raise wire_error(
            Code.INTERNAL, f"unknown encoding '{encoding}'; accepted encodings are gzip, identity"
        )
    inflater = Inflater()
    body = inflater.feed(answer.body)
    inflater.end()
    return body


def error_from_exchange(answer: Exchange) -> ConveyorError:
    """The error a non-200 Connect unary answer stands for."""
    data: object = None
    if _media(answer) == "application/json":
        try:
            data = json.loads(_inflate(answer))
        except (ValueError, ConveyorError):
            data = None
    return error_from_json(data, answer.status)


def error_from_json(data: object, status: int) -> ConveyorError:
    """The error a Connect JSON error body (``data``, already parsed) and HTTP ``status`` describe."""
    if not isinstance(data, dict):
        return wire_error(Code.from_http_status(status), _phrase(status))
    name = data.get("code")
    if name:
        code = Code.from_connect(name) if isinstance(name, str) else Code.UNAVAILABLE
        if code is Code.UNKNOWN and name != "unknown":
            code = Code.UNAVAILABLE  # a code name this client does not know (connectrpc's reading)
    else:
        code = Code.from_http_status(status)
    message = data.get("message", "")
    return wire_error(code, message if isinstance(message, str) else str(message))


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Client Closed Request" if status == 499 else ""
