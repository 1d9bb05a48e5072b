"""The call layer: route one HTTP exchange to a unary, server-streaming or Session handler.

This is the single isolation point between the transport and the services: a
handler's :class:`ConveyorError` becomes the call's status; any other exception
is logged and becomes ``internal`` for that call only. Cancellation (RST_STREAM,
connection loss, shutdown) propagates into the handler untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._h2kernel.eager import Continuation
from conveyor_sdk.errors import (
    ConveyorError,
    Internal,
    InvalidArgument,
    ResourceExhausted,
    Unimplemented,
)
from conveyor_server_min.service_api import CallContext, ServerStreamMethod, ServiceSet, UnaryMethod

from .auth import Authenticator
from .deadline import resume_timed, with_timeout
from .reply import CallIO, Reply, plain_response
from .wire import FLAG_END_STREAM, MessageDecoder, Negotiated, Wire, decompress, negotiate, parse_timeout

if TYPE_CHECKING:
    from .asgi import AsgiBridge

__all__ = ["SESSION_PATH", "Router"]

log = logging.getLogger("conveyor.server.http")

SESSION_PATH = "/conveyor.v1.WorkerService/Session"
RPC_PREFIX = "/conveyor.v1."
_HEALTH = frozenset({"/healthz", "/readyz"})
_ACCEPT_POST = ", ".join(
    (
        "application/grpc",
        "application/grpc+proto",
        "application/grpc+json",
        "application/grpc-web",
        "application/grpc-web+proto",
        "application/proto",
        "application/json",
        "application/connect+proto",
        "application/connect+json",
    )
)


class Router:
    """Serves every RPC path of a :class:`ServiceSet` plus ``/healthz`` and ``/readyz``.

    With a web application (``web``, see :mod:`.asgi`) every other request goes to it: any
    method but POST on a path other than the health checks, and a POST whose content-type is
    no RPC format on a path that is not an RPC path (e.g. an HTML form). RPCs pay nothing for
    it: a POST with an RPC content-type never looks at ``web``.
    """

    def __init__(
        self,
        services: ServiceSet,
        auth: Authenticator,
        *,
        max_message: int,
        ready: Callable[[], bool] = lambda: True,
        body_timeout: float | None = None,
    ) -> None:
        self.services = services
        self.auth = auth
        self.max_message = max_message
        self.ready = ready
        self.body_timeout = body_timeout
        self.web: AsgiBridge | None = None
        self._rpc_paths = frozenset((*services.unary, *services.server_streams, SESSION_PATH))
        self._admitted: set[tuple[str, str, bool, bool, bool]] = set()  # see _dispatch
        # The last admitted call's route: an HTTP/2 connection hands every request whose header block
        # repeats the last one the same header mapping (never mutated), which names the path, the
        # content type and the credentials; the tokens never change; a CallContext is immutable.
        self._last_route: tuple[UnaryMethod | None, ServerStreamMethod | None, CallContext] | None = None

    def rejects_before_body(self, method: str, authorization: str | None) -> bool:
        """Whether an RPC will be refused whatever its body (a POST without valid credentials).

        HTTP/1.1 uses this to answer without buffering the body, unless :meth:`is_web` says the
        request goes to the web application (which has its own authentication).
        """
        return method == "POST" and self.auth.check(authorization) is not None

    def runs_inline(self, io: CallIO) -> bool:
        """Whether :meth:`handle` may take its first step outside a task (see :mod:`.inline`): a
        POST to a unary method, whose handling needs a task only after it had to wait."""
        return io.method == "POST" and io.path in self.services.unary

    def is_web(self, method: str, path: str, content_type: str | None) -> bool:
        """Whether a request goes to the web application (never when there is none)."""
        if self.web is None:
            return False
        if method != "POST":
            return path not in _HEALTH
        return self._web_post(path, content_type)

    def _web_post(self, path: str, content_type: str | None) -> bool:
        return (
            negotiate(content_type) is None
            and path not in self._rpc_paths
            and not path.startswith(RPC_PREFIX)
        )

    async def handle(self, io: CallIO, body: bytes | None = None) -> None:
        """Serve one exchange to completion (always ends the response).

        ``body``: the whole request body, when the transport already has all of it (and counted
        it as read); None: read it from ``io``.
        """
        web = self.web
        if io.method != "POST":
            if web is not None and io.path not in _HEALTH:
                await web.handle(io)
            else:
                self._handle_plain(io)
            return
        neg = negotiate(io.headers.get("content-type"))
        if neg is None:
            if web is not None and self._web_post(io.path, None):
                await web.handle(io)
            else:
                plain_response(io, 415, "unsupported content-type", [("accept-post", _ACCEPT_POST)])
            return
        reply = Reply(io, neg)
        await self._guarded(reply, self._dispatch(io, neg, reply, body))

    def serve_whole(self, io: CallIO, body: bytes) -> Coroutine[Any, Any, None] | None:
        """Serve a request :meth:`runs_inline` accepted, whose whole body is here (and counted as
        read), as far as it goes without waiting: None once it is answered, else the coroutine that
        finishes it (its caller runs it as it would run :meth:`handle`).

        A Connect unary call whose handler answers without waiting (an in-memory Enqueue) is served
        here with no coroutine and no task; every other format goes through :meth:`handle`.
        """
        neg = negotiate(io.headers.get("content-type"))
        if neg is None or neg.wire is not Wire.CONNECT_UNARY:
            return self.handle(io, body)
        try:
            route = self._route(io, neg)
            if route is None:
                return None
            unary = route[0]
            assert unary is not None  # runs_inline: a unary path; _admit: a Connect unary content-type
            encoding = io.headers.get(neg.compression_header)
            request = self._connect_request(
                neg, unary.request_type, encoding, self._whole(body, self.max_message)
            )
            timeout = parse_timeout(Wire.CONNECT_UNARY, io.headers)
            call = unary.handler(request, route[2])
            if type(call) is CoroutineType:
                try:
                    waiting_on = call.send(None)
                except StopIteration as done:
                    call = done.value
                else:
                    reply = Reply(io, neg)
                    return self._guarded(reply, self._finish_unary(reply, neg, call, waiting_on, timeout))
            payload = neg.codec.encode(call)
            if not io.respond_whole(neg.content_type, payload):  # as Reply.whole, for this one format
                reply = Reply(io, neg)
                return self._guarded(reply, reply.unary(payload))
        except ConveyorError as exc:
            Reply(io, neg).fail_now(exc)
        except Exception:
            log.exception("handler for %s failed", io.path)
            Reply(io, neg).fail_now(Internal("internal error"))
        return None

    async def _finish_unary(
        self,
        reply: Reply,
        neg: Negotiated,
        call: CoroutineType[Any, Any, Any],
        waiting_on: Any,
        deadline: float | None,
    ) -> None:
        """The rest of a unary handler whose first step (run by :meth:`serve_whole`) had to wait;
        ``deadline``: the caller's, in seconds."""
        if deadline is None:
            response = await Continuation.after(call, waiting_on)
        else:
            response = await resume_timed(call, waiting_on, deadline)
        await self._answer(reply, neg, response)

    @staticmethod
    async def _answer(reply: Reply, neg: Negotiated, response: Message) -> None:
        """A unary call's response, in one step when the transport can."""
        payload = neg.codec.encode(response)
        if not reply.whole(payload):
            await reply.unary(payload)

    async def _guarded(self, reply: Reply, work: Coroutine[Any, Any, None]) -> None:
        """``work`` for a call, its errors answered as :meth:`handle` answers them."""
        try:
            await work
        except ConveyorError as exc:
            await self._fail(reply, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("handler for %s failed", reply.io.path)
            await self._fail(reply, Internal("internal error"))

    async def _fail(self, reply: Reply, error: ConveyorError) -> None:
        with contextlib.suppress(ConveyorError):  # the stream is already gone; nothing left to tell
            await reply.end(error)

    def _handle_plain(self, io: CallIO) -> None:
        if io.method not in ("GET", "HEAD"):
            plain_response(io, 405, "method not allowed", [("allow", "GET, HEAD, POST")])
        elif io.path == "/healthz":
            plain_response(io, 200, "ok")
        elif io.path == "/readyz":
            ok = self.ready()
            plain_response(io, 200 if ok else 503, "ok" if ok else "not ready")
        else:
            plain_response(io, 404, "not found")

    async def _dispatch(self, io: CallIO, neg: Negotiated, reply: Reply, body: bytes | None) -> None:
        route = self._route(io, neg)
        if route is None:
            return
        unary, stream, ctx = route
        wire = neg.wire
        encoding = io.headers.get(neg.compression_header)
        if unary is not None:
            request = await self._read_unary(io, neg, unary.request_type, encoding, body)
            timeout = parse_timeout(wire, io.headers)
            await self._answer(reply, neg, await with_timeout(unary.handler(request, ctx), timeout))
        elif stream is not None:
            request = await self._read_framed_single(io, neg, stream.request_type, encoding, body)
            await self._stream_out(stream, request, ctx, neg, reply)
        else:
            await self._session(io, neg, reply, ctx, encoding)

    @staticmethod
    async def _stream_out(
        method: ServerStreamMethod, request: Message, ctx: CallContext, neg: Negotiated, reply: Reply
    ) -> None:
        reply.start()
        async for item in method.handler(request, ctx):
            await reply.send(neg.codec.encode(item))
        await reply.end(None)

    def _route(
        self, io: CallIO, neg: Negotiated
    ) -> tuple[UnaryMethod | None, ServerStreamMethod | None, CallContext] | None:
        """The call's method (unary, server-streaming, or neither: the Session) and its handler's
        context, once admitted and authenticated; None when it was answered (415) already."""
        last = self._last_route
        if last is not None and last[2].headers is io.headers and last[2].peer == io.peer:
            return last  # the same header mapping from the same caller (see __init__)
        path = io.path
        unary = self.services.unary.get(path)
        stream = None if unary is not None else self.services.server_streams.get(path)
        key = (path, neg.content_type, io.http2, unary is not None, stream is not None)
        if key not in self._admitted:
            if not self._admit(io, neg, unary is not None, stream is not None):
                return None
            # _admit's verdict depends on nothing else, and the keys are finite (served paths times
            # the canonical content types, one per format): later ones check only credentials.
            self._admitted.add(key)
        denied = self.auth.check(io.headers.get("authorization"))
        if denied is not None:
            raise denied
        route = self._last_route = (unary, stream, CallContext(peer=io.peer, headers=io.headers))
        return route

    def _admit(self, io: CallIO, neg: Negotiated, unary: bool, stream: bool) -> bool:
        """Raise (or answer 415 and return False) when the call cannot go to its handler whoever
        makes it (the credentials are checked after this, for every new header mapping)."""
        wire, path = neg.wire, io.path
        is_session = not unary and not stream and path == SESSION_PATH
        if not unary and not stream and not is_session:
            raise Unimplemented(f"method {path} is not implemented by this server")
        if wire in (Wire.CONNECT_UNARY, Wire.CONNECT_STREAM) and (wire is Wire.CONNECT_UNARY) != unary:
            kind = "unary" if unary else "streaming"
            plain_response(io, 415, f"content-type {neg.content_type} cannot carry a {kind} call")
            return False
        if wire is Wire.GRPC and not io.http2:
            raise Unimplemented("gRPC requires HTTP/2; use Connect or gRPC-Web over HTTP/1.1")
        if is_session and (wire is Wire.GRPC_WEB or not io.http2):
            raise Unimplemented("the Session stream needs gRPC or Connect streaming over HTTP/2")
        return True

    async def _session(
        self, io: CallIO, neg: Negotiated, reply: Reply, ctx: CallContext, encoding: str | None
    ) -> None:
        codec = neg.codec

        async def send(message: pb.ServerMessage) -> None:
            await reply.send(codec.encode(message))

        def send_nowait(message: pb.ServerMessage, urgent: bool) -> bool:
            return reply.try_send(codec.encode(message), urgent=urgent)

        recv = self._recv_stream(io, neg, encoding)
        try:
            await self.services.session(ctx, recv, send, send_nowait=send_nowait)
        finally:
            with contextlib.suppress(RuntimeError):  # still being iterated by a reader task
                await recv.aclose()
        await reply.end(None)

    async def _recv_stream(
        self, io: CallIO, neg: Negotiated, encoding: str | None
    ) -> AsyncGenerator[pb.WorkerMessage, None]:
        decoder = MessageDecoder(self.max_message, encoding)
        decode = neg.codec.decode
        connect = neg.wire is Wire.CONNECT_STREAM
        timeout = self.body_timeout  # only until the first bytes: a session may then stay quiet
        while True:
            chunk = await io.read_chunk(timeout)
            timeout = None
            if chunk is None:
                if decoder.pending:
                    raise InvalidArgument("request stream ended in the middle of a message")
                return
            for flags, data in decoder.feed(chunk):
                if connect and flags & FLAG_END_STREAM:
                    return
                yield decode(data, pb.WorkerMessage)

    def _whole(self, body: bytes, limit: int) -> bytes:
        """A body that arrived whole, within ``limit``."""
        if len(body) > limit:
            raise ResourceExhausted(f"request body exceeds the limit of {self.max_message} bytes")
        return body

    def _connect_request(
        self, neg: Negotiated, cls: type[Message], encoding: str | None, body: bytes
    ) -> Message:
        """A Connect unary request's message from its whole body."""
        return neg.codec.decode(decompress(encoding, body, self.max_message), cls)

    async def _read_body(self, io: CallIO, limit: int, body: bytes | None) -> bytes:
        if body is not None:
            return self._whole(body, limit)
        parts: list[bytes] = []
        size = 0
        while (chunk := await io.read_chunk(self.body_timeout)) is not None:
            size += len(chunk)
            if size > limit:
                raise ResourceExhausted(f"request body exceeds the limit of {self.max_message} bytes")
            parts.append(chunk)
        return b"".join(parts)

    async def _read_unary(
        self, io: CallIO, neg: Negotiated, cls: type[Message], encoding: str | None, whole: bytes | None
    ) -> Message:
        if neg.wire is not Wire.CONNECT_UNARY:
            return await self._read_framed_single(io, neg, cls, encoding, whole)
        return self._connect_request(neg, cls, encoding, await self._read_body(io, self.max_message, whole))

    async def _read_framed_single(
        self, io: CallIO, neg: Negotiated, cls: type[Message], encoding: str | None, whole: bytes | None
    ) -> Message:
        body = await self._read_body(io, self.max_message + 5, whole)
        decoder = MessageDecoder(self.max_message, encoding)
        frames = decoder.feed(body)
        if decoder.pending:
            raise InvalidArgument("request body ended in the middle of a message (truncated frame)")
        messages = [data for flags, data in frames if not flags & FLAG_END_STREAM]
        if len(messages) != 1:
            raise InvalidArgument(f"expected exactly one request message, got {len(messages)}")
        return neg.codec.decode(messages[0], cls)
