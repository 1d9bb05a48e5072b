"""HTTP/1.1 server connection (h11): unary Connect / gRPC-Web calls and health checks.

One request at a time per connection (keep-alive, no pipelining in parallel):
the body is collected up to the message limit, the call runs, the response
goes out with a Content-Length. A body beyond the limit is answered at once
with ``resource_exhausted`` and the connection is closed afterwards.

Bounds (:class:`HttpLimits`): a POST without valid credentials is answered
from its head alone (the body is never buffered) and the connection closes;
the head must arrive within ``header_timeout`` and be at most
``max_header_bytes`` (431); body bytes may not pause longer than
``body_timeout`` (408 and close); a keep-alive connection idle for
``idle_timeout`` is closed; bytes that cannot start a request line get 400 at
once; a request with both Content-Length and Transfer-Encoding is answered and
then the connection is closed (RFC 9112 section 6.3).
"""

from __future__ import annotations

import asyncio
import logging
import re

import h11

from conveyor_sdk.errors import Canceled, ResourceExhausted

from .limits import Deadline, HttpLimits, close_soon
from .rpc import Router

__all__ = ["H1Connection", "could_start_request"]

log = logging.getLogger("conveyor.server.http")

_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]*")
_MAX_METHOD = 32
_GARBAGE_RESPONSE = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_TIMEOUT_RESPONSE = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def could_start_request(buf: bytes) -> bool:
    """Whether ``buf`` can still be the beginning of an HTTP/1.1 request line (a method token)."""
    buf = buf.lstrip(b"\r\n")
    end = _TOKEN.match(buf, 0, _MAX_METHOD + 1).end()  # type: ignore[union-attr]  # `*` always matches
    if end == len(buf):
        return end <= _MAX_METHOD
    return end > 0 and buf[end : end + 1] == b" "


def _header(request: h11.Request, name: bytes) -> str | None:
    values = [v.decode("utf-8", "replace") for k, v in request.headers if k == name]
    return ", ".join(values) if values else None


class _Exchange:
    """CallIO for one HTTP/1.1 request.

    A response whose headers carry a Content-Length (unary, errors, health) is
    buffered and sent on ``finish``; any other (a Connect or gRPC-Web stream)
    goes out at once with chunked transfer-encoding, each ``write`` as a chunk.
    """

    __slots__ = (
        "_conn",
        "body",
        "done",
        "headers",
        "http2",
        "method",
        "out",
        "path",
        "peer",
        "query",
        "status",
        "streaming",
    )

    def __init__(self, conn: H1Connection, request: h11.Request, body: list[bytes]) -> None:
        self._conn = conn
        self.method = request.method.decode("ascii", "replace").upper()
        self.path, _, self.query = request.target.decode("ascii", "replace").partition("?")
        self.headers: dict[str, str] = {}
        for name, value in request.headers:
            key = name.decode("ascii", "replace").lower()
            text = value.decode("utf-8", "replace")
            self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text
        self.peer = conn.peer
        self.http2 = False
        self.body = body
        self.status = 500
        self.out: list[tuple[str, str]] = []
        self.done = False
        self.streaming = False

    async def read_chunk(self, max_wait: float | None = None) -> bytes | None:
        if self.body:  # collected before dispatch (under the connection's own body timeout)
            return self.body.pop(0)
        if self._conn.overflow:
            raise ResourceExhausted("request body exceeds the message size limit")
        return None

    def respond(self, status: int, headers: list[tuple[str, str]], *, end: bool = False) -> None:
        self.status = status
        self.out = [(k, v) for k, v in headers if k != "content-length"]
        self._conn.response_body.clear()
        if end:
            self.finish()
        elif len(self.out) == len(headers):  # no Content-Length: stream it
            self.streaming = True
            self._conn.start_stream(self)

    async def write(self, data: bytes) -> None:
        if self.streaming:
            await self._conn.stream_data(data)
        else:
            self._conn.response_body.append(data)

    def write_nowait(self, data: bytes) -> None:
        self._conn.response_body.append(data)

    def try_write(self, data: bytes, *, urgent: bool = False) -> bool:
        return False  # no full-duplex streams on HTTP/1.1: writers always take ``write``

    def respond_whole(self, content_type: str, body: bytes) -> bool:
        return False  # the response is one write on HTTP/1.1 anyway

    def finish(self, trailers: list[tuple[str, str]] | None = None) -> None:
        if not self.done:
            self.done = True
            if self.streaming:
                self._conn.end_stream()
            else:
                self._conn.send_response(self)


class H1Connection:
    """Serves one HTTP/1.1 connection on an asyncio transport."""

    def __init__(
        self,
        transport: asyncio.Transport,
        router: Router,
        peer: str,
        *,
        max_body: int,
        limits: HttpLimits | None = None,
    ) -> None:
        self.transport = transport
        self.router = router
        self.peer = peer
        self.max_body = max_body
        self.limits = limits or HttpLimits()
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)
        self.discard = False  # refused from its head: drop the body, close after the answer
        self._phase = "head"  # "idle" (keep-alive) | "head" | "body" | "busy" (handler running)
        self._timer = Deadline(self._on_timeout)
        self.request: h11.Request | None = None
        self.body: list[bytes] = []
        self.body_size = 0
        self.overflow = False
        self.response_body: list[bytes] = []
        self.task: asyncio.Task[None] | None = None
        self._closed = False
        self._closing = False
        self._write_paused: asyncio.Future[None] | None = None

    def start(self, initial: bytes) -> None:
        self._arm("head", self.limits.header_timeout)
        if initial:
            self.data_received(initial)

    def data_received(self, data: bytes) -> None:
        if self._closed or self.overflow or self.discard:
            return  # after an oversize or refused request we only answer and close; drop the rest
        if self._phase == "idle":
            self._arm("head", self.limits.header_timeout)
        self.h11.receive_data(data)
        self._process()
        if (
            self._phase == "head"
            and not self._closed
            and self.h11.their_state is h11.IDLE
            and not could_start_request(self.h11.trailing_data[0][: _MAX_METHOD + 8])
        ):
            log.debug("%s sent bytes that cannot start an HTTP request", self.peer)
            self.transport.write(_GARBAGE_RESPONSE)
            self.close()

    # ---- timeouts -------------------------------------------------------------------------------
    def _arm(self, phase: str, seconds: float) -> None:
        """Enter ``phase`` with a deadline ``seconds`` from now."""
        self._phase = phase
        self._timer.set(seconds)

    def _on_timeout(self) -> None:
        if self._closed or self._phase == "busy":
            return
        if self._phase != "idle":
            log.debug("HTTP/1.1 request from %s timed out (%s)", self.peer, self._phase)
            self.transport.write(_TIMEOUT_RESPONSE)
        self.close()

    def _process(self) -> None:
        while not self._closed and self.task is None:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._bad_request(exc)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.ConnectionClosed):
                self.close()
                return
            self._on_event(event)

    def _on_event(self, event: object) -> None:
        if isinstance(event, h11.Request):
            self._on_request(event)
        elif isinstance(event, h11.Data):
            if self.overflow:
                return
            self._timer.set(self.limits.body_timeout)
            self.body_size += len(event.data)
            if self.body_size > self.max_body:
                self.overflow = True
                self.body.clear()
                self._dispatch()  # answer now; the connection closes after the response
            else:
                self.body.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage) and not self.overflow:
            self._dispatch()

    def _on_request(self, event: h11.Request) -> None:
        self.request, self.body, self.body_size, self.overflow = event, [], 0, False
        names = {name for name, _ in event.headers}
        if b"content-length" in names and b"transfer-encoding" in names:
            self._closing = True  # RFC 9112 section 6.3: answer, then close the connection
        method = event.method.decode("ascii", "replace").upper()
        router = self.router
        if router.rejects_before_body(method, _header(event, b"authorization")) and not router.is_web(
            method, event.target.decode("ascii", "replace").partition("?")[0], _header(event, b"content-type")
        ):
            self.discard = True
            self._dispatch()
            return
        self._arm("body", self.limits.body_timeout)
        if self.h11.they_are_waiting_for_100_continue:  # curl sends Expect for bodies > 1 KiB
            self._send(h11.InformationalResponse(status_code=100, headers=[]))

    def _dispatch(self) -> None:
        assert self.request is not None
        self._phase = "busy"
        exchange = _Exchange(self, self.request, self.body)
        if not self.overflow and not self.discard:
            self.transport.pause_reading()
        self.task = asyncio.get_running_loop().create_task(self._run(exchange))

    async def _run(self, exchange: _Exchange) -> None:
        try:
            await self.router.handle(exchange)
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception("unhandled error serving %s", exchange.path)
        if not exchange.done:
            exchange.respond(500, [("content-type", "text/plain")])
            exchange.write_nowait(b"internal error")
            exchange.finish()
        self.task = None
        self._next_cycle()

    def send_response(self, exchange: _Exchange) -> None:
        if self._closed:
            return
        body = b"".join(self.response_body)
        self.response_body.clear()
        headers = [*exchange.out, ("content-length", str(len(body)))]
        if self.overflow or self._closing or self.discard:
            headers.append(("connection", "close"))
        try:
            data = self.h11.send(h11.Response(status_code=exchange.status, headers=headers))
            data += self.h11.send(h11.Data(data=body)) if body else b""
            data += self.h11.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            log.debug("cannot send HTTP/1.1 response to %s: %s", self.peer, exc)
            self.close()
            return
        self.transport.write(data)

    def start_stream(self, exchange: _Exchange) -> None:
        """Send the headers of a chunked (streamed) response."""
        self._send(h11.Response(status_code=exchange.status, headers=exchange.out))

    async def stream_data(self, data: bytes) -> None:
        """Send one chunk; wait while the socket's write buffer is full."""
        if self._closed:
            raise Canceled("connection closed")
        self._send(h11.Data(data=data))
        while self._write_paused is not None and not self._closed:
            await self._write_paused
        if self._closed:
            raise Canceled("connection closed")

    def end_stream(self) -> None:
        self._send(h11.EndOfMessage())

    def _send(self, event: h11.InformationalResponse | h11.Response | h11.Data | h11.EndOfMessage) -> None:
        if self._closed:
            return
        try:
            self.transport.write(self.h11.send(event) or b"")
        except h11.LocalProtocolError as exc:
            log.debug("cannot send HTTP/1.1 response to %s: %s", self.peer, exc)
            self.close()

    def _next_cycle(self) -> None:
        if self._closed:
            return
        if self.h11.our_state is h11.MUST_CLOSE or self.overflow or self._closing or self.discard:
            self.close()
            return
        if self.h11.their_state is h11.DONE and self.h11.our_state is h11.DONE:
            self.h11.start_next_cycle()
            if self.h11.trailing_data[0]:
                self._arm("head", self.limits.header_timeout)
            else:
                self._arm("idle", self.limits.idle_timeout)
            self.transport.resume_reading()
            self._process()
        else:
            self.close()

    def _bad_request(self, exc: h11.RemoteProtocolError) -> None:
        log.debug("bad HTTP/1.1 request from %s: %s", self.peer, exc)
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            status = exc.error_status_hint or 400
            body = b"bad request\n"
            try:
                data = self.h11.send(
                    h11.Response(
                        status_code=status,
                        headers=[("content-length", str(len(body))), ("connection", "close")],
                    )
                )
                data += self.h11.send(h11.Data(data=body)) + self.h11.send(h11.EndOfMessage())
                self.transport.write(data)
            except h11.LocalProtocolError:
                pass
        self.close()

    def pause_writing(self) -> None:
        if self._write_paused is None:
            self._write_paused = asyncio.get_running_loop().create_future()
            if not self._closed:
                self.transport.pause_reading()

    def resume_writing(self) -> None:
        fut, self._write_paused = self._write_paused, None
        if fut is not None and not fut.done():
            fut.set_result(None)
        if not self._closed and (self.task is None or self.overflow or self.discard):
            self.transport.resume_reading()

    def shutdown(self) -> None:
        """Close when the current request (if any) has been answered."""
        self._closing = True
        if self.task is None:
            self.close()

    async def wait_idle(self) -> None:
        task = self.task
        if task is not None:
            await asyncio.wait([task])

    async def wait_handlers(self) -> None:
        await self.wait_idle()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            close_soon(self.transport)
        self._timer.cancel()

    def abort(self) -> None:
        self.close()
        self.connection_lost()

    def connection_lost(self) -> None:
        self._closed = True
        self._timer.close()  # no cycle through its callback: the buffers go with the last reference
        self.body.clear()
        self.response_body.clear()
        self.resume_writing()
        task = self.task
        if task is not None and not task.done():
            task.cancel()
