"""Connect unary calls spoken directly over our HTTP/2 transport, without connectrpc's client.

Why: between ``Client.enqueue()`` and the socket write, connectrpc's generic client (request
context, header objects, ``wait_for``) and pyqwest's request and response objects (built in Rust,
then handed back to Python through its glue coroutine) were about half of the producer's Python.
On an idle process every one of those calls runs cold: the whole path took 340-420 us before the
request's bytes were written, and this module takes about 130 us of that away (see
``bench/latency_bench.py`` and CHANGELOG). Less Python per call also means less CPU per enqueue.

What it covers: the async :class:`~conveyor_sdk.client.Client`'s task calls (Enqueue,
EnqueueBatch, EnqueueTx, GetTask) when the Client runs them on its own
:class:`~conveyor_sdk._client.h2transport.H2Transport` with the Connect protocol and binary proto.
gRPC, JSON, HTTP/1.1, a transport given by the caller, the admin service and the
:class:`~conveyor_sdk.client.SyncClient` keep using connectrpc.

It behaves as connectrpc's client does (``tests/sdk_client/test_connect_unary.py`` compares the
two on the same answers):

* request headers: ``content-type: application/proto``, ``connect-protocol-version: 1``,
  ``connect-timeout-ms`` when the call has a deadline, ``accept-encoding: gzip,identity``,
  then the client's own headers (token, ``headers=``; a ``user-agent`` there replaces ours);
* a 200 answer must be ``application/proto`` (``unknown`` for another media type, ``internal``
  for another ``application/`` codec); a gzip body is inflated (up to ``h2transport.MAX_INFLATED`` bytes);
  a body that does not parse is ``invalid_argument`` ("unmarshal message: ...");
* any other status with an ``application/json`` body is the error it describes (an unknown code
  name reads as ``unavailable``, a missing one comes from the HTTP status); without a JSON body
  the HTTP status alone decides (400 internal, 401 unauthenticated, 403 permission denied,
  404 unimplemented, 429/502/503/504 unavailable, anything else unknown);
* the deadline is sent as ``connect-timeout-ms`` and kept locally: when it passes, the stream is
  reset and the call fails with ``deadline_exceeded``.

Errors are raised as :class:`~conveyor_sdk.errors.ConveyorError` with the same class, message
and ``details["connect_code"]`` that :func:`~conveyor_sdk._client.transport.translate` makes of
connectrpc's ``ConnectError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, NamedTuple

from google.protobuf import message_factory  # type: ignore[import-untyped]  # protobuf ships no stubs
from google.protobuf.descriptor import ServiceDescriptor  # type: ignore[import-untyped]
from google.protobuf.message import Message  # type: ignore[import-untyped]

from conveyor_sdk._client.h2transport import Exchange, H2Transport, Inflater
from conveyor_sdk._version import __version__
from conveyor_sdk.errors import Code, ConveyorError, DeadlineExceeded, error_for_code

__all__ = ["ConnectUnaryStub", "error_from_exchange"]

USER_AGENT = f"conveyor-python/{__version__}"
_STATIC = (
    ("content-type", "application/proto"),
    ("connect-protocol-version", "1"),
    ("accept-encoding", "gzip,identity"),
)


class _Route(NamedTuple):
    path: str
    output: type[Message]


class _Method:
    """One RPC of a :class:`ConnectUnaryStub`: ``await stub.enqueue(request, headers=..., timeout_ms=...)``.

    ``keeps_deadline``: the call sends and enforces ``timeout_ms`` itself, so
    :class:`~conveyor_sdk._client.transport.UnaryCaller` adds no timer of its own."""

    __slots__ = ("route", "stub")
    keeps_deadline = True

    def __init__(self, stub: ConnectUnaryStub, route: _Route) -> None:
        self.stub = stub
        self.route = route

    async def __call__(self, request: Message, *, headers: Mapping[str, str], timeout_ms: int | None) -> Any:
        return await self.stub.call(self.route, request, headers, timeout_ms)


class ConnectUnaryStub:
    """The unary methods of ``service`` (snake_case attributes, as connectrpc generates them)."""

    def __init__(self, transport: H2Transport, service: ServiceDescriptor) -> None:
        self._transport = transport
        self._fields: dict[tuple[int | None, tuple[tuple[str, str], ...]], tuple[tuple[str, str], ...]] = {}
        for method in service.methods:
            if method.client_streaming or method.server_streaming:
                continue
            output = message_factory.GetMessageClass(method.output_type)
            route = _Route(f"/{service.full_name}/{method.name}", output)
            setattr(self, _snake(method.name), _Method(self, route))

    async def call(
        self, route: _Route, request: Message, headers: Mapping[str, str], timeout_ms: int | None
    ) -> Any:
        """One call: the decoded answer, or the error it carries (a ConveyorError)."""
        fields = self._request_fields(headers, timeout_ms)
        seconds = None if timeout_ms is None else timeout_ms / 1000
        try:
            answer = await self._transport.exchange(route.path, fields, request.SerializeToString(), seconds)
        except TimeoutError:
            raise DeadlineExceeded(f"call exceeded its {seconds:g}s deadline") from None
        if answer.status != 200:
            raise error_from_exchange(answer)
        return _decode(answer, route.output)

    def _request_fields(
        self, headers: Mapping[str, str], timeout_ms: int | None
    ) -> tuple[tuple[str, str], ...]:
        user = tuple(headers.items())
        key = (timeout_ms, user)
        fields = self._fields.get(key)
        if fields is None:
            timed = () if timeout_ms is None else (("connect-timeout-ms", str(timeout_ms)),)
            own = tuple((k, v) for k, v in user if k.lower() not in _OWN)
            agent = () if any(k.lower() == "user-agent" for k, _ in own) else (("user-agent", USER_AGENT),)
            fields = (*timed, *_STATIC, *agent, *own)
            if len(self._fields) >= 64:
                self._fields.clear()
            self._fields[key] = fields
        return fields


_OWN = frozenset(name for name, _ in _STATIC) | {"connect-timeout-ms"}


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


def _header(headers: list[tuple[str, str]], name: str) -> str:
    for key, value in headers:
        if key == name:
            return value
    return ""


def _decode(answer: Exchange, output: type[Message]) -> Any:
    media = _header(answer.headers, "content-type").partition(";")[0].strip().lower()
    if media != "application/proto":
        code = Code.UNKNOWN if not media.startswith("application/") else Code.INTERNAL
        raise _error(code, f"invalid content-type: '{media}'; expecting 'application/proto'")
    body = _inflate(answer)
    try:
        return output.FromString(body)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise _error(Code.INVALID_ARGUMENT, f"unmarshal message: {exc}") from None


def _inflate(answer: Exchange) -> bytes:
    encoding = _header(answer.headers, "content-encoding")
    if encoding in ("", "identity"):
        return answer.body
    if encoding != "gzip":
        raise _error(Code.INTERNAL, f"unknown encoding '{encoding}'; accepted encodings are gzip, identity")
    inflater = Inflater()
    body = inflater.feed(answer.body)
    inflater.end()
    return body


def error_from_exchange(answer: Exchange) -> ConveyorError:
    """The error a non-200 Connect unary answer stands for."""
    media = _header(answer.headers, "content-type").partition(";")[0].strip().lower()
    data: object = None
    if media == "application/json":
        try:
            data = json.loads(_inflate(answer))
        except (ValueError, ConveyorError):
            data = None
    if not isinstance(data, dict):
        return _error(Code.from_http_status(answer.status), _phrase(answer.status))
    name = data.get("code")
    if name:
        code = Code.from_connect(name) if isinstance(name, str) else Code.UNAVAILABLE
        if code is Code.UNKNOWN and name != "unknown":
            code = Code.UNAVAILABLE  # a code name this client does not know (connectrpc's reading)
    else:
        code = Code.from_http_status(answer.status)
    message = data.get("message", "")
    return _error(code, message if isinstance(message, str) else str(message))


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Client Closed Request" if status == 499 else ""


def _error(code: Code, message: str) -> ConveyorError:
    return error_for_code(code, message, details={"connect_code": code.connect_name})
