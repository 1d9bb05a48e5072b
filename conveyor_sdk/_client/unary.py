"""The async Client's one task-call path: unary RPCs spoken by us, over whichever transport moves bytes.

Every task call of :class:`~conveyor_sdk.client.Client` (Enqueue, EnqueueBatch, EnqueueTx,
GetTask) goes through :class:`UnaryStub`, for every protocol and wire format the Client accepts:

* a :class:`Wire` frames the request and reads the answer: Connect unary
  (:mod:`~conveyor_sdk._client.connect_unary`) or gRPC (:mod:`~conveyor_sdk._client.grpc_unary`),
  each with a :class:`MessageCodec` (binary proto or protobuf JSON);
* an :class:`Exchanger` moves the bytes: our asyncio HTTP/2 transport
  (:class:`~conveyor_sdk._client.h2transport.H2Transport`) by default, or a pyqwest transport
  (:class:`~conveyor_sdk._client.pyqwest_exchange.PyqwestExchange`) for ``http2=False`` and a
  ``transport=`` given to the Client.

Why not connectrpc's generated client: between ``enqueue()`` and the socket, its generic client
(request contexts, header objects, ``wait_for``) and pyqwest's request and response objects were
about half of the producer's Python; docs/client.md ("Transport") has the measurements and the
command. The answers are read as connectrpc's client reads them:
``tests/sdk_client/test_unary_parity.py`` holds both to the same task or the same error class, code
and message, for Connect and gRPC, proto and JSON. The admin service and the blocking
:class:`~conveyor_sdk.client.SyncClient` keep connectrpc.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from google.protobuf import json_format, message_factory  # type: ignore[import-untyped]  # no stubs
from google.protobuf.descriptor import ServiceDescriptor  # type: ignore[import-untyped]
from google.protobuf.message import Message  # type: ignore[import-untyped]

from conveyor_sdk._version import __version__
from conveyor_sdk.errors import Code, ConveyorError, DeadlineExceeded, error_for_code

__all__ = [
    "JSON",
    "PROTO",
    "USER_AGENT",
    "Exchange",
    "Exchanger",
    "MessageCodec",
    "UnaryStub",
    "Wire",
    "header",
    "user_agent",
    "wire_error",
]

USER_AGENT = f"conveyor-python/{__version__}"
_FIELD_CACHE = 64  # distinct (deadline, headers) pairs whose request fields are kept


class Exchange(NamedTuple):
    """A whole response: status, headers and trailers (lower-case names, no pseudo-headers), body."""

    status: int
    headers: Sequence[tuple[str, str]]
    body: bytes
    trailers: Sequence[tuple[str, str]] = ()


class Exchanger(Protocol):
    """Moves one request's bytes and returns the whole answer (see ``H2Transport.exchange``)."""

    async def exchange(
        self, path: str, fields: tuple[tuple[str, str], ...], body: bytes, seconds: float | None
    ) -> Exchange:
        """POST ``body`` to ``path``; TimeoutError after ``seconds``; ConveyorError on failure."""
        ...


class MessageCodec:
    """Binary protobuf (``proto``) or protobuf JSON (``json``), named as both protocols name them."""

    __slots__ = ("json", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.json = name == "json"

    def encode(self, message: Message) -> bytes:
        if self.json:
            return json_format.MessageToJson(message, indent=None).encode()  # type: ignore[no-any-return]
        return message.SerializeToString()  # type: ignore[no-any-return]

    def decode(self, data: bytes, output: type[Message]) -> Any:
        """The message; ``invalid_argument`` ("unmarshal message: ...") when it does not parse."""
        try:
            if self.json:
                return json_format.Parse(data, output(), ignore_unknown_fields=True)
            return output.FromString(data)
        except Exception as exc:  # protobuf's DecodeError, ParseError and friends
            raise wire_error(Code.INVALID_ARGUMENT, f"unmarshal message: {exc}") from None


PROTO = MessageCodec("proto")
JSON = MessageCodec("json")


class Wire(Protocol):
    """A protocol's framing for one codec: request headers and body out, the answer read back."""

    codec: MessageCodec

    def request_fields(
        self, user: tuple[tuple[str, str], ...], timeout_ms: int | None
    ) -> tuple[tuple[str, str], ...]:
        """The request's header fields (the user's headers last; names lower-case)."""
        ...

    def frame(self, message: bytes) -> bytes:
        """The request body holding one encoded message."""
        ...

    def read(self, answer: Exchange, output: type[Message]) -> Any:
        """The decoded answer, or the error it carries (a ConveyorError)."""
        ...


class _Route(NamedTuple):
    path: str
    output: type[Message]


class _Method:
    """One RPC of a :class:`UnaryStub`: ``await stub.enqueue(request, headers=..., timeout_ms=...)``.

    ``keeps_deadline``: the call sends and enforces ``timeout_ms`` itself, so
    :class:`~conveyor_sdk._client.transport.UnaryCaller` adds no timer of its own."""

    __slots__ = ("route", "stub")
    keeps_deadline = True

    def __init__(self, stub: UnaryStub, route: _Route) -> None:
        self.stub = stub
        self.route = route

    def __call__(
        self, request: Message, *, headers: Mapping[str, str], timeout_ms: int | None
    ) -> Coroutine[Any, Any, Any]:
        # The stub's own coroutine, not one wrapped around it: one frame fewer per call.
        return self.stub.call(self.route, request, headers, timeout_ms)


class UnaryStub:
    """The unary methods of ``service`` (snake_case attributes, as connectrpc generates them)."""

    def __init__(self, exchanger: Exchanger, service: ServiceDescriptor, wire: Wire) -> None:
        self.exchanger = exchanger
        self.wire = wire
        self._fields: dict[tuple[int | None, tuple[tuple[str, str], ...]], tuple[tuple[str, str], ...]] = {}
        for method in service.methods:
            if method.client_streaming or method.server_streaming:
                continue
            output = message_factory.GetMessageClass(method.output_type)
            route = _Route(f"/{service.full_name}/{method.name}", output)
            setattr(self, _snake(method.name), _Method(self, route))

    def __repr__(self) -> str:
        return f"<UnaryStub {type(self.wire).__name__}/{self.wire.codec.name} over {self.exchanger!r}>"

    async def call(
        self, route: _Route, request: Message, headers: Mapping[str, str], timeout_ms: int | None
    ) -> Any:
        """One call: the decoded answer, or the error it carries (a ConveyorError)."""
        wire = self.wire
        fields = self._request_fields(headers, timeout_ms)
        seconds = None if timeout_ms is None else timeout_ms / 1000
        body = wire.frame(wire.codec.encode(request))
        try:
            answer = await self.exchanger.exchange(route.path, fields, body, seconds)
        except TimeoutError:
            raise DeadlineExceeded(f"call exceeded its {seconds:g}s deadline") from None
        return wire.read(answer, route.output)

    def _request_fields(
        self, headers: Mapping[str, str], timeout_ms: int | None
    ) -> tuple[tuple[str, str], ...]:
        user = tuple(headers.items())
        key = (timeout_ms, user)
        fields = self._fields.get(key)
        if fields is None:
            fields = self.wire.request_fields(user, timeout_ms)
            if len(self._fields) >= _FIELD_CACHE:
                self._fields.clear()
            self._fields[key] = fields
        return fields


def user_agent(user: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Our ``user-agent``, unless the user's headers carry one."""
    return () if any(k.lower() == "user-agent" for k, _ in user) else (("user-agent", USER_AGENT),)


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


def header(headers: Sequence[tuple[str, str]], name: str) -> str:
    """The first value of ``name`` (lower-case) in ``headers``, or ``""``."""
    for key, value in headers:
        if key == name:
            return value
    return ""


def wire_error(code: Code, message: str) -> ConveyorError:
    """The error for ``code``, with ``details["connect_code"]`` as connectrpc's errors translate."""
    return error_for_code(code, message, details={"connect_code": code.connect_name})
