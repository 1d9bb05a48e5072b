"""Accept connections on one port and pick HTTP/2 (preface sniffing) or HTTP/1.1 for each.

Works the same over TLS (ALPN offers ``h2`` and ``http/1.1``; the client's
first bytes decide either way). :class:`Hub` tracks live connections so the
server can send GOAWAY, wait for open streams and close everything on stop,
and counts them per client address (``max_connections_per_client``). The
first bytes must arrive within ``header_timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Coroutine
from typing import Any, Protocol, cast

from .h1conn import H1Connection
from .h2conn import H2Connection
from .limits import FloodCounters, HttpLimits
from .memory import Trimmer
from .rpc import Router

__all__ = ["HttpProtocol", "Hub", "make_ssl_context"]

log = logging.getLogger("conveyor.server.http")

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class _Impl(Protocol):
    def start(self, initial: bytes) -> None: ...
    def data_received(self, data: bytes) -> None: ...
    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...
    def shutdown(self) -> None: ...
    async def wait_idle(self) -> None: ...
    async def wait_handlers(self) -> None: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...
    def connection_lost(self) -> None: ...


class Hub:
    """Shared state of one listener: the router, limits and the set of live connections."""

    def __init__(self, router: Router, *, max_message: int, limits: HttpLimits | None = None) -> None:
        self.router = router
        self.max_message = max_message
        self.limits = limits or HttpLimits()
        self.connections: set[HttpProtocol] = set()
        self.per_client: dict[str, int] = {}
        self._floods: dict[str, FloodCounters] = {}
        self._trimmer = Trimmer()
        self.accepting = True
        self._all_closed: asyncio.Future[None] | None = None

    def shutdown(self) -> None:
        """GOAWAY / close-after-response on every connection."""
        self.accepting = False
        for conn in list(self.connections):
            conn.shutdown()

    async def wait_idle(self, seconds: float, *, flush: float = 0.5) -> bool:
        """Wait for every handler to finish, then (at most ``flush`` s) for responses to drain.

        A response stuck behind a peer that stopped reading cannot drain, so its
        wait is short; the handlers themselves get the whole budget. False on timeout.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        if not await _gather_within([c.wait_handlers() for c in self.connections], seconds):
            return False
        budget = min(flush, max(0.0, deadline - loop.time()))
        return await _gather_within([c.wait_idle() for c in self.connections], budget)

    def close_all(self) -> None:
        """Close every connection now (cancelling what still runs)."""
        for conn in list(self.connections):
            conn.close()

    async def wait_closed(self, seconds: float) -> None:
        """Until every socket is really closed; after ``seconds``, abort the rest (e.g. a TLS peer
        that never answers close_notify) so no transport outlives the server."""
        try:
            async with asyncio.timeout(seconds):
                while self.connections:
                    self._all_closed = asyncio.get_running_loop().create_future()
                    await self._all_closed
        except TimeoutError:
            for conn in list(self.connections):
                if conn.transport is not None:
                    conn.transport.abort()
            await asyncio.sleep(0)  # let the aborted transports run connection_lost

    def admit(self, conn: HttpProtocol, client: str) -> bool:
        """Register a new connection; False when its client already holds the maximum."""
        self.connections.add(conn)
        count = self.per_client.get(client, 0)
        if count >= self.limits.max_connections_per_client:
            return False
        self.per_client[client] = count + 1
        conn.client = client
        return True

    def floods_for(self, client: str | None) -> FloodCounters:
        """The RST_STREAM/PING counters of one client address: reconnecting does not refill them."""
        if client is None:
            return FloodCounters.new(self.limits)
        counters = self._floods.get(client)
        if counters is None:
            if len(self._floods) >= 4096:  # forget clients that are gone
                self._floods = {c: v for c, v in self._floods.items() if c in self.per_client}
            counters = self._floods[client] = FloodCounters.new(self.limits)
        return counters

    def discard(self, conn: HttpProtocol) -> None:
        """A connection is gone."""
        self.connections.discard(conn)
        if self.accepting:
            self._trimmer.poke()
        else:
            self._trimmer.cancel()
        client = conn.client
        if client is not None:
            conn.client = None
            left = self.per_client.get(client, 1) - 1
            if left > 0:
                self.per_client[client] = left
            else:
                self.per_client.pop(client, None)
        fut = self._all_closed
        if not self.connections and fut is not None and not fut.done():
            fut.set_result(None)


class HttpProtocol(asyncio.Protocol):
    """One accepted connection: sniff the first bytes, then delegate to h2 or h11."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.transport: asyncio.Transport | None = None
        self.impl: _Impl | None = None
        self.peer = ""
        self.client: str | None = None  # address counted against max_connections_per_client
        self._buf = b""
        self._sniff_timer: asyncio.TimerHandle | None = None
        self._shutdown = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        client = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        if not self.hub.admit(self, client):
            log.warning("%s has too many open connections; closing the new one", client)
            transport.abort()
            return
        if not self.hub.accepting:
            transport.close()
            return
        timeout = self.hub.limits.header_timeout
        self._sniff_timer = asyncio.get_running_loop().call_later(timeout, transport.abort)

    def data_received(self, data: bytes) -> None:
        if self.impl is not None:
            self.impl.data_received(data)
            return
        self._buf += data
        if len(self._buf) < len(H2_PREFACE) and H2_PREFACE.startswith(self._buf):
            return  # could still be the HTTP/2 preface
        assert self.transport is not None
        if self._sniff_timer is not None:
            self._sniff_timer.cancel()
        hub = self.hub
        if self._buf.startswith(H2_PREFACE):
            self.impl = H2Connection(
                self.transport, hub.router, self.peer, limits=hub.limits, floods=hub.floods_for(self.client)
            )
        else:
            self.impl = H1Connection(
                self.transport, hub.router, self.peer, max_body=hub.max_message + 5, limits=hub.limits
            )
        initial, self._buf = self._buf, b""
        self.impl.start(initial)
        if self._shutdown:
            self.impl.shutdown()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.hub.discard(self)
        if self._sniff_timer is not None:
            self._sniff_timer.cancel()
        if self.impl is not None:
            self.impl.connection_lost()

    def pause_writing(self) -> None:
        if self.impl is not None:
            self.impl.pause_writing()

    def resume_writing(self) -> None:
        if self.impl is not None:
            self.impl.resume_writing()

    def shutdown(self) -> None:
        self._shutdown = True
        if self.impl is not None:
            self.impl.shutdown()
        elif self.transport is not None:
            self.transport.close()

    async def wait_idle(self) -> None:
        if self.impl is not None:
            await self.impl.wait_idle()

    async def wait_handlers(self) -> None:
        if self.impl is not None:
            await self.impl.wait_handlers()

    def open_streams(self) -> int:
        """Requests in progress on this connection."""
        impl = self.impl
        if isinstance(impl, H2Connection):
            return len(impl.streams)
        if isinstance(impl, H1Connection):
            return int(impl.task is not None)
        return 0

    def close(self) -> None:
        if self.impl is not None:
            self.impl.close()
        elif self.transport is not None:
            self.transport.close()


async def _gather_within(waits: list[Coroutine[Any, Any, None]], seconds: float) -> bool:
    if not waits:
        return True
    try:
        async with asyncio.timeout(seconds):
            await asyncio.gather(*waits)
    except TimeoutError:
        return False
    return True


def make_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """Server TLS context offering ``h2`` then ``http/1.1`` via ALPN."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with contextlib.suppress(AttributeError, ssl.SSLError):
        ctx.set_ciphers("ECDHE+AESGCM:ECDHE+CHACHA20")
    return ctx
