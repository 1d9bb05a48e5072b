"""Serve a generic ASGI 3 application (e.g. the web dashboard) on the server's own port.

The server hands every request that is not an RPC and not a health check to the
:class:`AsgiBridge` (see ``Router``). The bridge turns the :class:`CallIO` of that
exchange (HTTP/1.1 or HTTP/2) into an ASGI ``http`` scope with ``receive`` and
``send``, and runs the application's ``lifespan`` at server start and stop. The
server never imports the application: it receives it from whoever embeds it.

Rules the bridge keeps:

* **Bounded bodies.** ``receive()`` yields the request body chunk by chunk, at
  most ``max_body`` bytes (a declared ``Content-Length`` above it is refused with
  413 before the application runs; a body that grows past it fails the call with
  413) and with the server's ``body_timeout`` between chunks (408).
* **Responses as the application sends them.** ``http.response.start`` is held
  until the first body message; a response with ``Content-Length`` goes out whole
  (HTTP/1.1) and any other one streams (``more_body``; HTTP/1.1 chunked).
* **Disconnects.** Once the body is read, ``receive()`` waits and then answers
  ``http.disconnect`` when the response is complete or the client has gone;
  ``send()`` to a gone client raises :class:`ClientDisconnected` (an ``OSError``).
* **Failures stay inside.** An application exception is logged (``conveyor.server.web``)
  and answered ``500 internal server error`` when no response has started; the
  client never sees a traceback. After the response has started the exchange is
  left unfinished, so the connection resets the stream (HTTP/2) or closes (HTTP/1.1).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote

from conveyor_sdk.errors import Canceled, DeadlineExceeded, ResourceExhausted

from .reply import CallIO, plain_response

__all__ = ["AsgiApp", "AsgiBridge", "ClientDisconnected", "WebAppError"]

log = logging.getLogger("conveyor.server.web")

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

WEB_MAX_BODY = 1 << 20  # web forms are small; RPC bodies have their own (larger) limit
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"upgrade"})
_ASGI = {"version": "3.0", "spec_version": "2.3"}


class ClientDisconnected(OSError):
    """``send()`` was called after the client went away."""


class WebAppError(RuntimeError):
    """The application's lifespan startup failed."""


class _BodyTooLarge(Exception):
    pass


class AsgiBridge:
    """One ASGI application served through the server's CallIO exchanges."""

    def __init__(
        self,
        app: AsgiApp,
        *,
        scheme: str,
        server: tuple[str, int],
        max_body: int = WEB_MAX_BODY,
        body_timeout: float | None = None,
    ) -> None:
        self.app = app
        self.scheme = scheme
        self.server = server
        self.max_body = max_body
        self.body_timeout = body_timeout
        self._lifespan: _Lifespan | None = None

    # ---- lifespan --------------------------------------------------------------------------------
    async def startup(self, seconds: float = 30.0) -> None:
        """Run the application's lifespan startup (an app without lifespan support is fine)."""
        self._lifespan = _Lifespan(self.app)
        await self._lifespan.startup(seconds)

    async def shutdown(self, seconds: float = 5.0) -> None:
        """Run the lifespan shutdown (idempotent; bounded by ``seconds``)."""
        lifespan, self._lifespan = self._lifespan, None
        if lifespan is not None:
            await lifespan.shutdown(seconds)

    # ---- requests --------------------------------------------------------------------------------
    def scope(self, io: CallIO) -> dict[str, Any]:
        """The ASGI ``http`` scope of one exchange."""
        headers: list[tuple[bytes, bytes]] = []
        for name, value in io.headers.items():
            if name.startswith(":"):
                continue
            # HTTP/2 may split cookies into several fields, which the connection joined with ", "
            text = value.replace(", ", "; ") if name == "cookie" else value
            headers.append((name.encode("latin-1"), text.encode("latin-1", "replace")))
        if io.http2 and "host" not in io.headers and ":authority" in io.headers:
            headers.append((b"host", io.headers[":authority"].encode("latin-1", "replace")))
        host, _, port = io.peer.rpartition(":")
        return {
            "type": "http",
            "asgi": _ASGI,
            "http_version": "2" if io.http2 else "1.1",
            "method": io.method,
            "scheme": self.scheme,
            "path": unquote(io.path),
            "raw_path": io.path.encode("latin-1", "replace"),
            "query_string": io.query.encode("latin-1", "replace"),
            "root_path": "",
            "headers": headers,
            "client": (host.strip("[]"), int(port)) if port.isdigit() else None,
            "server": self.server,
        }

    async def handle(self, io: CallIO) -> None:
        """Serve one exchange with the application (always ends the response or leaves it to reset)."""
        declared = io.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            plain_response(io, 413, "request body too large")
            return
        call = _Call(io, self)
        try:
            await self.app(self.scope(io), call.receive, call.send)
        except asyncio.CancelledError:
            raise
        except _BodyTooLarge:
            call.fail(413, "request body too large")
        except DeadlineExceeded:
            call.fail(408, "request body timed out")
        except ResourceExhausted:
            call.fail(413, "request body too large")
        except (ClientDisconnected, Canceled):
            return
        except Exception:
            log.exception("web application failed on %s %s", io.method, io.path)
            call.fail(500, "internal server error")
            return
        if not call.finished:
            if call.started:
                log.error("web application returned without finishing its response to %s", io.path)
            else:
                log.error("web application returned without a response to %s", io.path)
                call.fail(500, "internal server error")
        call.done.set()


class _Call:
    """``receive``/``send`` of one exchange."""

    __slots__ = ("body_left", "bridge", "done", "finished", "head", "io", "received", "started")

    def __init__(self, io: CallIO, bridge: AsgiBridge) -> None:
        self.io = io
        self.bridge = bridge
        self.received = 0
        self.body_left = True
        self.head: tuple[int, list[tuple[str, str]]] | None = None
        self.started = False
        self.finished = False
        self.done = asyncio.Event()  # response complete or client gone: receive() says disconnect

    async def receive(self) -> Message:
        if self.body_left and not self.done.is_set():
            try:
                chunk = await self.io.read_chunk(self.bridge.body_timeout)
            except Canceled:
                self.done.set()
                return {"type": "http.disconnect"}
            if chunk is None:
                self.body_left = False
                return {"type": "http.request", "body": b"", "more_body": False}
            self.received += len(chunk)
            if self.received > self.bridge.max_body:
                raise _BodyTooLarge
            return {"type": "http.request", "body": chunk, "more_body": True}
        await self.done.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if self.done.is_set() and not self.finished:
            raise ClientDisconnected("the client has gone")
        if kind == "http.response.start":
            if self.head is not None or self.finished:
                raise RuntimeError("http.response.start sent twice")
            self.head = (int(message["status"]), _headers(message.get("headers", ()), self.io.http2))
        elif kind == "http.response.body":
            await self._body(bytes(message.get("body", b"")), bool(message.get("more_body", False)))
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")

    async def _body(self, data: bytes, more: bool) -> None:
        if self.head is None or self.finished:
            raise RuntimeError("http.response.body without http.response.start, or after the last one")
        io = self.io
        if not self.started:
            self.started = True
            io.respond(*self.head)
        if data and io.method != "HEAD":
            try:
                await io.write(data)
            except Canceled:
                self.done.set()
                raise ClientDisconnected("the client has gone") from None
        if not more:
            self.finished = True
            io.finish()
            self.done.set()

    def fail(self, status: int, text: str) -> None:
        """Answer ``status`` when nothing was sent yet; else leave the response unfinished (reset/close)."""
        if not self.started:
            self.started = self.finished = True
            plain_response(self.io, status, text)
        self.done.set()


def _headers(raw: Any, http2: bool) -> list[tuple[str, str]]:
    out = []
    for name, value in raw:
        key = bytes(name).lower()
        if http2 and key in _HOP_BY_HOP:
            continue
        out.append((key.decode("latin-1"), bytes(value).decode("latin-1")))
    return out


class _Lifespan:
    """Drives the ``lifespan`` scope of an application in a background task."""

    def __init__(self, app: AsgiApp) -> None:
        self.app = app
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.started = asyncio.get_running_loop().create_future()
        self.stopped = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None

    async def startup(self, seconds: float) -> None:
        self.task = asyncio.create_task(self._run(), name="asgi-lifespan")
        await self.inbox.put({"type": "lifespan.startup"})
        try:
            async with asyncio.timeout(seconds):
                error = await self.started
        except TimeoutError:
            self.task.cancel()
            raise WebAppError(f"web application did not start within {seconds:g}s") from None
        if error is not None:
            raise WebAppError(f"web application failed to start: {error}")

    async def shutdown(self, seconds: float) -> None:
        task = self.task
        if task is None or task.done():
            return
        await self.inbox.put({"type": "lifespan.shutdown"})
        try:
            async with asyncio.timeout(seconds):
                error = await self.stopped
            if error:
                log.warning("web application shutdown failed: %s", error)
            await task
        except TimeoutError:
            log.warning("web application did not shut down within %.1fs", seconds)
            task.cancel()

    async def _run(self) -> None:
        try:
            await self.app({"type": "lifespan", "asgi": _ASGI}, self.inbox.get, self._send)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not self.started.done():  # an app without lifespan support raises on the scope: fine
                log.debug("web application does not support lifespan: %r", exc)
                self.started.set_result(None)
            else:
                log.exception("web application lifespan failed")
        for fut in (self.started, self.stopped):
            if not fut.done():
                fut.set_result(None)

    async def _send(self, message: Message) -> None:
        kind = message["type"]
        if kind in ("lifespan.startup.complete", "lifespan.startup.failed") and not self.started.done():
            self.started.set_result(message.get("message") or "failed" if kind.endswith("failed") else None)
        elif kind in ("lifespan.shutdown.complete", "lifespan.shutdown.failed") and not self.stopped.done():
            self.stopped.set_result(message.get("message") or "failed" if kind.endswith("failed") else None)
