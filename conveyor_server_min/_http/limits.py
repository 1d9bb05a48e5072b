"""Per-connection resource bounds of the HTTP layer, and a sans-I/O rate counter.

Every bound exists so that one client cannot take memory, CPU or connections
from the others. The defaults follow what production HTTP servers ship
(nginx, Go ``net/http``, Netty); all of them are settings (``ServerConfig.http``)
so tests can run them in sub-second terms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CLOSE_GRACE", "Deadline", "FloodCounters", "HttpLimits", "WindowCounter", "close_soon"]

CLOSE_GRACE = 2.0  # seconds a closing connection may take to flush before it is aborted


def close_soon(transport: asyncio.BaseTransport, grace: float = CLOSE_GRACE) -> None:
    """Close after writing what is buffered; abort if the peer has not taken it within ``grace`` s.

    ``transport.close()`` alone waits for the write buffer to drain, which a
    peer that never reads would make last forever.
    """
    transport.close()
    asyncio.get_running_loop().call_later(grace, transport.abort)


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """Timeouts (seconds) and caps applied to every connection.

    * ``idle_timeout``: an HTTP/2 connection with no open stream, or an HTTP/1.1
      keep-alive connection between requests, is closed after this long
      (HTTP/2 with GOAWAY NO_ERROR).
    * ``header_timeout``: time allowed from the first byte to the complete
      request head (HTTP/1.1 request line and headers; the HTTP/2 preface).
      HTTP/1.1 answers 408 and closes.
    * ``body_timeout``: longest silence while a request body is being read
      (HTTP/1.1 and HTTP/2 unary/server-stream bodies) and before the first
      message of a Session stream; the call fails ``deadline_exceeded``
      (HTTP/1.1: 408 and close). An open Session stream may stay quiet
      afterwards: its liveness is the session protocol's business.
    * ``max_streams``: SETTINGS_MAX_CONCURRENT_STREAMS; extra streams are refused.
    * ``max_connections_per_client``: open connections per client IP address;
      extra ones are closed at accept.
    * ``max_header_bytes``: one request head (HTTP/1.1 head; HTTP/2 header block
      before and after HPACK decoding).
    * ``max_resets`` within ``flood_window``: RST_STREAM frames one client
      address may send, over all its connections (CVE-2023-44487, "rapid
      reset"); beyond it the connection gets GOAWAY(ENHANCE_YOUR_CALM).
    * ``max_pings`` within ``flood_window``: PING frames one client address may
      send, over all its connections (gRPC servers enforce a ping policy the
      same way); beyond it GOAWAY(ENHANCE_YOUR_CALM).
    * ``max_empty_frames``: consecutive DATA frames without payload or
      END_STREAM (and empty CONTINUATION frames); beyond it GOAWAY(ENHANCE_YOUR_CALM).
    * ``max_pending_output``: bytes the server may hold for a peer that does
      not read; beyond it the connection is dropped. Reading from a connection
      also stops while its writes are paused, so control-frame replies
      (PING/SETTINGS ACK) cannot pile up.
    """

    idle_timeout: float = 120.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_streams: int = 100
    max_connections_per_client: int = 128
    max_header_bytes: int = 64 * 1024
    max_resets: int = 200
    max_pings: int = 1000
    flood_window: float = 10.0
    max_empty_frames: int = 32
    max_pending_output: int = 64 << 20


class WindowCounter:
    """Counts events in fixed windows of ``window`` seconds; ``hit(now)`` says whether ``limit`` is passed."""

    __slots__ = ("_count", "_start", "limit", "window")

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self._start = float("-inf")
        self._count = 0

    def hit(self, now: float) -> bool:
        """Record one event at ``now``; True when the window now holds more than ``limit`` events."""
        if now - self._start >= self.window:
            self._start = now
            self._count = 0
        self._count += 1
        return self._count > self.limit


@dataclass(frozen=True, slots=True)
class FloodCounters:
    """The RST_STREAM and PING counters of one client address, shared by all its connections."""

    resets: WindowCounter
    pings: WindowCounter

    @classmethod
    def new(cls, limits: HttpLimits) -> FloodCounters:
        """Fresh counters for ``limits``."""
        window = limits.flood_window
        return cls(WindowCounter(limits.max_resets, window), WindowCounter(limits.max_pings, window))


class Deadline:
    """A deadline that moves often, served by one timer that re-arms itself lazily.

    Pushing the deadline later is a float store (the timer, when it fires early,
    re-arms for the new time); only moving it earlier replaces the timer.
    ``callback`` runs once the deadline has really passed.
    """

    __slots__ = ("_at", "_callback", "_handle", "_loop", "_timer_at")

    def __init__(self, callback: Callable[[], None], loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._callback = callback
        self._at = 0.0
        self._timer_at = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._loop = loop  # None: the running loop at the first set()

    def set(self, seconds: float) -> None:
        """Expire ``seconds`` from now (replacing any earlier setting)."""
        loop = self._loop
        if loop is None:
            # Looked up once: a connection sets its idle deadline after every request, and before
            # Python 3.12 asyncio.get_running_loop() makes a getpid() system call each time.
            loop = self._loop = asyncio.get_running_loop()
        self._at = loop.time() + seconds
        if self._handle is not None:
            if self._timer_at <= self._at:
                return
            self._handle.cancel()
        self._timer_at = self._at
        self._handle = loop.call_at(self._at, self._fire)

    def cancel(self) -> None:
        """Never fire (until ``set`` again)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def close(self) -> None:
        """Cancel for good and drop the callback (it usually holds its owner: no cycle left)."""
        self.cancel()
        self._callback = _nothing

    def _fire(self) -> None:
        self._handle = None
        loop = self._loop
        assert loop is not None  # set() armed the timer
        if loop.time() < self._at:
            self._timer_at = self._at
            self._handle = loop.call_at(self._at, self._fire)
            return
        self._callback()


def _nothing() -> None:
    return None
