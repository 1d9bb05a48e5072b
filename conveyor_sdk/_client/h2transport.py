"""An asyncio HTTP/2 transport for connectrpc's async client (the pyqwest ``Transport`` protocol).

Why: pyqwest runs every request on its own Rust runtime thread. For a unary call that hop
(wake the runtime thread, hand the request over, and back) costs more than all of our and
connectrpc's Python together when the process has been idle; this transport frames the
request with h2 and writes it in the caller's own event-loop turn instead.

What it does:

* one multiplexed connection per client, opened on the first call; concurrent calls use
  separate streams (at most the server's ``MAX_CONCURRENT_STREAMS``; more wait);
* a new connection when the old one died or received GOAWAY (the old one finishes its
  streams first); ``http://`` is h2c with prior knowledge, ``https://`` TLS with ALPN ``h2``,
  the client's CA bundle (``tls_ca_cert``) or the system store;
* request and response bodies of any size under both directions' flow control; a response
  with ``content-encoding: gzip`` is inflated (as pyqwest's own transport does: connectrpc
  asks for gzip and leaves inflating to the transport), up to :data:`MAX_INFLATED` bytes;
* a dead connection (a PING unanswered for the keepalive timeout: see ``h2conn``) fails its
  open calls with Unavailable and is replaced by the next call;
* a cancelled call (e.g. its deadline, kept by :class:`~conveyor_sdk._client.transport.UnaryCaller`)
  resets its stream with RST_STREAM(CANCEL);
* failures are :class:`~conveyor_sdk.errors.ConveyorError`\\ s (connection refused, TLS,
  GOAWAY, reset, lost connection: Unavailable ...), which connectrpc wraps and
  :func:`~conveyor_sdk._client.transport.translate` unwraps.

:meth:`H2Transport.exchange` is the same request without pyqwest's request and response
objects: the path of every task call of the async Client (:mod:`~conveyor_sdk._client.unary`).

HTTP/1.1 (``http2=False``), the blocking :class:`~conveyor_sdk.client.SyncClient` and the admin
service (its server stream ``watch_events`` included) stay on pyqwest.
"""

from __future__ import annotations

import asyncio
import urllib.parse
import zlib
from collections.abc import AsyncIterator
from typing import cast

import pyqwest
from hpack import NeverIndexedHeaderTuple

from conveyor_sdk._client.h2conn import BufferedH2Conn, H2Conn
from conveyor_sdk._client.h2stream import H2Stream
from conveyor_sdk._client.unary import Exchange
from conveyor_sdk._transport import _connect
from conveyor_sdk._transport.keepalive import KeepaliveOptions
from conveyor_sdk._transport.reads import wants_buffered
from conveyor_sdk.errors import ConveyorError, Internal, ResourceExhausted, Unavailable

__all__ = ["MAX_INFLATED", "Exchange", "H2Transport", "Inflater"]

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host"}
)
_CLOSE_WAIT = 2.0
_HEADER_LISTS = 64
MAX_INFLATED = 64 << 20  # bytes a gzip response may inflate to
DEFAULT_KEEPALIVE = KeepaliveOptions()  # PINGs while calls are open (see h2conn)


class H2Transport:
    """A pyqwest ``Transport`` speaking HTTP/2 to one server from the running event loop."""

    def __init__(
        self,
        address: str,
        *,
        ca_pem: bytes | None = None,
        connect_timeout: float = 10.0,
        keepalive: KeepaliveOptions | None = DEFAULT_KEEPALIVE,
        dialer: _connect.Dialer = _connect.dial_tcp,
    ) -> None:
        self._dialer = dialer  # how connections are opened: TCP, or an in-memory pair in tests
        self._target = _connect.parse_target(address)
        parts = urllib.parse.urlsplit(address)
        self._prefix = f"{parts.scheme}://{parts.netloc}"
        self._ssl = _connect.tls_context(None, ca_data=ca_pem) if self._target.scheme == "https" else None
        self._connect_timeout = connect_timeout
        self._keepalive = keepalive
        self._authority = self._target.authority  # a computed property of Target: once, not per call
        self._header_lists: dict[tuple[object, ...], list[tuple[str, str]]] = {}  # see _headers
        self._conn: H2Conn | None = None
        self._old: set[H2Conn] = set()  # draining connections still finishing calls
        self._lock = asyncio.Lock()
        self._closed = False
        self.connections = 0  # connections opened so far (statistics, tests)

    def __repr__(self) -> str:
        return f"<H2Transport {self._target.authority} {self._conn!r}>"

    async def execute(self, request: pyqwest.Request) -> pyqwest.Response:
        """Send ``request`` on a stream of the shared connection; the response body streams."""
        body = request.content
        if not isinstance(body, bytes):
            body = await _read_body(body)
        headers = self._headers(request)
        conn = self._conn
        if conn is None or not conn.has_capacity():
            conn = await self._ready()
        stream, sent = conn.start(headers, body)
        try:
            if sent < len(body):
                await conn.send_rest(stream, body, sent)
            while stream.headers is None and not stream.done:
                await stream.wake.wait()
        except BaseException:
            conn.cancel(stream)
            raise
        return _response(conn, stream)

    async def exchange(
        self, path: str, fields: tuple[tuple[str, str], ...], body: bytes, seconds: float | None
    ) -> Exchange:
        """POST ``body`` to ``path`` and read the whole response, within ``seconds`` (None: no limit).

        The deadline counts from this call; at the deadline the stream is reset and TimeoutError
        raised. Waiting for the answer, the connection's deadline timer keeps it
        (:meth:`H2Conn.watch`: no timer of its own per call); waiting for a connection, or for
        windows to send the rest of a large body, ``asyncio.timeout_at`` does. The response body
        is returned to the server's flow control as it is read."""
        headers = self._headers_for("POST", self._prefix + path, fields)
        conn = self._conn
        if conn is None or not conn.has_capacity():
            deadline = None if seconds is None else asyncio.get_running_loop().time() + seconds
            async with asyncio.timeout_at(deadline):
                conn = await self._ready()
        else:  # the connection's loop is the running one (no getpid() to look it up)
            deadline = None if seconds is None else conn.loop.time() + seconds
        stream, sent = conn.start(headers, body)
        try:
            if sent < len(body):
                async with asyncio.timeout_at(deadline):
                    await conn.send_rest(stream, body, sent)
            if deadline is not None:
                conn.watch(stream, deadline)
            parts: list[bytes] = []
            chunks = stream.chunks
            while True:  # the whole answer, read in this coroutine (no frame of its own per call)
                while chunks:
                    data, size = chunks.popleft()
                    conn.consumed(stream, size)
                    parts.append(data)
                if stream.error is not None:
                    raise stream.error
                if stream.ended:
                    break
                if stream.timed_out:
                    raise TimeoutError
                await stream.wake.wait()
        except BaseException:
            if not stream.done:  # deadline, cancellation: the server may stop working on it
                conn.cancel(stream)
            raise
        if stream.headers is None:
            raise Unavailable("the server ended the stream without a response")
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        return Exchange(stream.status, stream.fields, body, stream.trailers)

    async def aclose(self) -> None:
        """Close every connection (GOAWAY first); calls still open fail. Idempotent."""
        self._closed = True
        conns = [c for c in (self._conn, *self._old) if c is not None]
        self._conn, self._old = None, set()
        for conn in conns:
            conn.close()
        for conn in conns:
            try:
                await asyncio.wait_for(asyncio.shield(conn.lost), _CLOSE_WAIT)
            except TimeoutError:
                if conn.transport is not None:
                    conn.transport.abort()

    # ---- internals -----------------------------------------------------------------------------

    def _headers(self, request: pyqwest.Request) -> list[tuple[str, str]]:
        """The request's HTTP/2 header list; a unary client repeats a few, so they are kept (≤ 64).

        The list is shared between calls: nothing below mutates it (h2 and ``send_request``
        only read it)."""
        return self._headers_for(request.method, request.url, tuple(request.headers.items()))

    def _headers_for(
        self, method: str, url: str, fields: tuple[tuple[str, str], ...]
    ) -> list[tuple[str, str]]:
        key = (method, url, fields)
        headers = self._header_lists.get(key)
        if headers is None:
            headers = self._build_headers(method, url, fields)
            if len(self._header_lists) >= _HEADER_LISTS:
                self._header_lists.clear()
            self._header_lists[key] = headers
        return headers

    def _build_headers(
        self, method: str, url: str, fields: tuple[tuple[str, str], ...]
    ) -> list[tuple[str, str]]:
        if url.startswith(self._prefix) and url[len(self._prefix) : len(self._prefix) + 1] in ("/", "?", ""):
            path = url[len(self._prefix) :] or "/"
        else:
            raise Unavailable(f"this client only talks to {self._prefix}, not to {url}", retryable=False)
        headers = [
            (":method", method),
            (":scheme", self._target.scheme),
            (":path", path),
            (":authority", self._authority),
        ]
        for name, value in fields:
            key = name.lower()
            if key == "authorization":  # never HPACK-indexed: keeps the secret out of compression tables
                headers.append(cast("tuple[str, str]", NeverIndexedHeaderTuple(key, value)))
            elif key not in _HOP_BY_HOP:
                headers.append((key, value))
        return headers

    async def _ready(self) -> H2Conn:
        """A connection with room for one more stream (connecting or waiting as needed)."""
        while True:
            if self._closed:
                raise Unavailable("the client is closed", retryable=False)
            conn = self._conn
            if conn is not None and conn.has_capacity():
                return conn
            if conn is not None and not conn.draining:
                await conn.changed.wait()  # MAX_CONCURRENT_STREAMS reached: wait for a stream to end
                continue
            async with self._lock:
                if self._conn is conn:  # nobody replaced it while we waited for the lock
                    self._retire(conn)
                    self._conn = await self._connect()

    def _retire(self, conn: H2Conn | None) -> None:
        if conn is None:
            return
        if conn.streams and not conn.closed:
            self._old.add(conn)
            conn.lost.add_done_callback(lambda _: self._old.discard(conn))
        else:
            conn.close()

    async def _connect(self) -> H2Conn:
        target, loop = self._target, asyncio.get_running_loop()
        server_hostname = target.host if self._ssl is not None else None
        try:
            async with asyncio.timeout(self._connect_timeout):
                protocol = BufferedH2Conn if wants_buffered(loop) else H2Conn
                transport, conn = await self._dialer(
                    lambda: protocol(target, self._keepalive),
                    target,
                    tls=self._ssl,
                    server_hostname=server_hostname,
                )
        except ConveyorError as exc:
            raise _not_sent(exc) from None
        except (OSError, TimeoutError) as exc:
            raise _not_sent(_connect.connect_error(exc, target)) from None
        try:
            _connect.check_alpn(transport, target)
        except ConveyorError as exc:
            raise _not_sent(exc) from None
        self.connections += 1
        return conn


def _not_sent(err: ConveyorError) -> ConveyorError:
    """Mark a failure to open the connection: no request left, so another server may take it."""
    err.details = {**err.details, "not_sent": True}
    return err


async def _read_body(content: object) -> bytes:
    """A request body as bytes (connectrpc sends bytes; a stream of chunks is joined)."""
    if content is None:
        return b""
    if isinstance(content, bytearray | memoryview):
        return bytes(content)
    parts = [bytes(chunk) async for chunk in cast("AsyncIterator[bytes]", content)]
    return b"".join(parts)


def _response(conn: H2Conn, stream: H2Stream) -> pyqwest.Response:
    if stream.headers is None:  # failed before any response
        conn.cancel(stream)
        raise stream.error or Unavailable("the server ended the stream without a response")
    status, headers = stream.status, list(stream.fields)
    trailers = pyqwest.Headers()
    content = _content(conn, stream, trailers)
    if ("content-encoding", "gzip") in headers:  # connectrpc expects the transport to inflate it
        content = _inflated(content)
    return pyqwest.Response(
        status=status,
        http_version=pyqwest.HTTPVersion.HTTP2,
        headers=pyqwest.Headers(headers),
        content=content,
        trailers=trailers,
    )


class Inflater:
    """Inflates a gzip body chunk by chunk, refusing more than :data:`MAX_INFLATED` bytes out."""

    __slots__ = ("_left", "_zlib")

    def __init__(self) -> None:
        self._zlib = zlib.decompressobj(wbits=31)
        self._left = MAX_INFLATED

    def feed(self, data: bytes) -> bytes:
        """The bytes ``data`` inflates to."""
        try:
            out = self._zlib.decompress(data, self._left + 1)
        except zlib.error as exc:
            raise Internal(f"malformed gzip response: {exc}") from None
        self._left -= len(out)
        if self._left < 0 or self._zlib.unconsumed_tail:
            raise ResourceExhausted(f"response inflates beyond {MAX_INFLATED} bytes")
        return out

    def end(self) -> None:
        """The body is over: it must have been a whole gzip stream."""
        if not self._zlib.eof:
            raise Internal("malformed gzip response: truncated")


async def _inflated(content: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    inflater = Inflater()
    async for chunk in content:
        yield inflater.feed(chunk)
    inflater.end()


async def _content(conn: H2Conn, stream: H2Stream, trailers: pyqwest.Headers) -> AsyncIterator[bytes]:
    """The response body as it arrives; trailers are filled in at the end."""
    try:
        while True:
            if stream.chunks:
                data, size = stream.chunks.popleft()
                conn.consumed(stream, size)
                yield data
            elif stream.error is not None:
                raise stream.error
            elif stream.ended:
                for name, value in stream.trailers:
                    trailers.add(name, value)
                return
            else:
                await stream.wake.wait()
    finally:
        if not stream.done:
            conn.cancel(stream)  # the reader gave up early (closed, cancelled, deadline)
