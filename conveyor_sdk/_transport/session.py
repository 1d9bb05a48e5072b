"""Asyncio shell around :class:`SessionCore`: one socket, one session stream.

The socket is driven by an :class:`asyncio.Protocol` (no background tasks):
``data_received`` feeds the core, and every state change ends in
:meth:`SessionStream._write_out`, which schedules :meth:`SessionStream._write_now`, the single
place that writes to the socket, once per event-loop iteration: all frames produced in one tick
(e.g. a burst of Results answering a burst of Dispatches) leave in one ``send`` system call. A
change that left nothing to write (a read whose acknowledgement is batched) schedules nothing.
The messages of :meth:`SessionStream.send_nowait` wait for that same callback and go into h2
together, as one DATA frame (gRPC lets a frame carry several messages): h2's framing of a
DATA frame costs more than the Result in it. Anything that must follow them in the stream
(an awaited ``send``, the half-close, the cancel) queues them first.
Waiting callers (``recv``/``send``) are woken through per-waiter futures.

Keepalive (:mod:`.keepalive`): one loop timer per connection PINGs the server and watches
what waits to be written; a PING left unanswered, or a write that makes no progress, for the
keepalive timeout ends the stream with a transient :class:`~conveyor_sdk.errors.Unavailable`
and aborts the socket, waking every waiting ``send`` and ``recv``. So no send waits forever:
every one ends within that timeout, written or failed. The timer runs once per PING interval,
never per message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._transport import _connect
from conveyor_sdk._transport.clock import Clock, SystemClock, Timer
from conveyor_sdk._transport.core import SessionCore
from conveyor_sdk._transport.keepalive import (
    Keepalive,
    KeepaliveOptions,
    LinkDead,
    PingNow,
)
from conveyor_sdk._transport.options import TransportOptions
from conveyor_sdk._transport.reads import BufferedReads, wants_buffered
from conveyor_sdk._transport.signal import Signal
from conveyor_sdk.errors import ConveyorError, Internal, Unavailable

__all__ = ["DEFAULT_PATH", "SessionStream", "open_session"]

log = logging.getLogger("conveyor.transport")

DEFAULT_PATH = "/conveyor.v1.WorkerService/Session"
_CLOSE_WAIT = 2.0


class _SocketProtocol(asyncio.Protocol):
    """Forwards transport callbacks to the owning :class:`SessionStream`."""

    def __init__(self, stream: SessionStream) -> None:
        self._stream = stream
        # The stream's own method, as an instance attribute: the loop calls it with no hop
        # through this class (uvloop reads it once, when the transport is made).
        self.data_received = stream._on_data  # type: ignore[method-assign]

    def data_received(self, data: bytes) -> None:
        self._stream._on_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stream._on_lost(exc)

    def pause_writing(self) -> None:
        self._stream._write_paused = True

    def resume_writing(self) -> None:
        self._stream._write_paused = False
        self._stream._notify()


class _BufferedSocketProtocol(BufferedReads, _SocketProtocol):
    """:class:`_SocketProtocol` on asyncio's own loop: one ``recv_into`` per read (see ``reads``)."""


class SessionStream:
    """One bidirectional session stream (``WorkerMessage`` out, ``ServerMessage`` in).

    Safe for several tasks to ``send`` concurrently (messages go out whole, in call
    order); ``recv`` is meant for one reader task. Every failure is a ConveyorError.
    """

    def __init__(
        self,
        core: SessionCore,
        *,
        protocol: str,
        keepalive: KeepaliveOptions | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._core = core
        self.protocol = protocol
        self._transport: asyncio.Transport | None = None
        self._signal = Signal()  # any state change (senders wait on it)
        self._inbound = Signal()  # a message arrived or the stream ended (``recv`` waits on it)
        self._write_paused = False
        self._loop = asyncio.get_running_loop()
        self._lost: asyncio.Future[None] = self._loop.create_future()
        self._write_scheduled = False
        self._closed = False
        self._listener: Callable[[], None] | None = None
        self._in_read = False  # the listener runs inside a read (``_on_data`` writes once after it)
        self.messages_sent = 0
        self.messages_received = 0
        self._keepalive_options = keepalive
        self._clock: Clock = clock or SystemClock()  # the keepalive reads its monotonic time
        self.keepalive: Keepalive | None = None  # made once connected
        self._timer: Timer | None = None
        self._timer_at = 0.0
        self._written = 0  # bytes handed to the socket transport so far
        self._batch: list[bytes] = []  # framed send_nowait messages, into h2 together by _write_now

    def __repr__(self) -> str:
        counts = f"sent={self.messages_sent} received={self.messages_received}"
        return f"<SessionStream {self.protocol} {counts} {self._core!r}>"

    # ---- public API ----------------------------------------------------------------------------

    @property
    def response_headers(self) -> dict[str, str] | None:
        """Response headers once received (None before)."""
        return self._core.response_headers

    @property
    def trailers(self) -> dict[str, str]:
        """gRPC trailers (or Trailers-Only headers) once received; empty before."""
        return self._core.trailers

    @property
    def finished(self) -> bool:
        """True once the stream ended, cleanly or not (messages received before stay readable)."""
        return self._core.finished

    @property
    def error(self) -> ConveyorError | None:
        """Why the stream ended (None: a clean end, or not ended yet)."""
        return self._core.error

    @property
    def goaway_received(self) -> bool:
        """True once the server announced it is going away."""
        return self._core.goaway_received

    def statistics(self) -> dict[str, Any]:
        """Snapshot of counters for observability."""
        core = self._core
        return {
            "protocol": self.protocol,
            "messages_sent": self.messages_sent,
            "messages_received": self.messages_received,
            "bytes_queued": core.queued,
            "bytes_flushed": core.flushed,
            "unread_messages": core.unread,
            "fast_data_frames": core.fast_frames,
            "finished": core.finished,
            "pings_sent": self.keepalive.pings if self.keepalive is not None else 0,
            "ping_rtt": self.keepalive.rtt if self.keepalive is not None else None,
        }

    async def send(self, msg: pb.WorkerMessage) -> None:
        """Send one message; returns once it is within the peer's flow-control window.

        Cancelling a waiting ``send`` does not withdraw the message: it is already queued whole.
        """
        await self._send_bytes(msg.SerializeToString(), framed=False)

    def send_nowait(self, msg: pb.WorkerMessage) -> None:
        """Queue one message whole and start writing it; never waits.

        For an owner that must not stall on a slow link (the worker's driver): what it sends
        is bounded by its own protocol, and a write that cannot drain ends the stream after
        the keepalive timeout. Raises the stream's error if it can no longer send.
        """
        core = self._core
        blocker = core.send_blocker()
        if blocker is not None:
            raise blocker
        self._batch.append(core.frame_message(msg.SerializeToString()))
        if not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_now)
        self.messages_sent += 1

    @property
    def write_blocked(self) -> bool:
        """Whether queued bytes wait (for the peer's flow-control window or a full socket)."""
        self._queue_batch()  # a message of this turn that does not fit the window waits too
        return self._core.unflushed or self._write_paused

    def _queue_batch(self) -> None:
        """Queue this turn's ``send_nowait`` messages in the core, in order, as one DATA frame."""
        if self._batch:
            data = b"".join(self._batch)
            self._batch.clear()
            self._core.queue_message(data, framed=True)

    async def send_raw(self, data: bytes, *, framed: bool = False) -> None:
        """Send raw message bytes (``framed=True``: already length-prefixed, sent verbatim)."""
        await self._send_bytes(bytes(data), framed=framed)

    async def recv(self) -> pb.ServerMessage | None:
        """Next server message; None after a clean end; raises ConveyorError on failure."""
        core = self._core
        while True:
            msg = self.recv_nowait()
            if msg is not None:
                return msg
            if core.finished:
                if core.error is not None:
                    raise core.error
                return None
            await self._inbound.wait()

    def recv_nowait(self) -> pb.ServerMessage | None:
        """The next complete server message if one is queued, else None (never waits, never ends)."""
        core = self._core
        if not core.inbox:
            return None
        data = core.take_message()
        if data is None:
            return None
        if not self._in_read:  # taking it may have queued a WINDOW_UPDATE; a read writes once at its end
            self._write_out()
        self.messages_received += 1
        msg = pb.ServerMessage()
        try:
            msg.ParseFromString(data)
        except Exception as exc:  # protobuf's DecodeError (google.protobuf ships no type stubs)
            raise _invalid(exc) from None
        return msg

    def set_listener(self, listener: Callable[[], None] | None) -> None:
        """Call ``listener()`` from the socket callback whenever complete messages arrived, and
        whenever the stream may have ended (:attr:`finished`).

        The latency path: the owner can take them with :meth:`recv_nowait` in the same
        event-loop turn as the read, instead of one turn later through ``recv``. The
        listener must not raise. ``recv`` keeps working (and sees what was not taken).
        """
        self._listener = listener

    async def close_send(self) -> None:
        """Half-close the request side (END_STREAM) once queued messages went out."""
        core = self._core
        if core.send_closed:
            return
        self._queue_batch()
        core.close_send()
        self._write_out()
        while not (core.send_closed or core.connection_closed or core.remote_ended):
            await self._wait()
        if not core.send_closed and core.error is not None:
            raise core.error

    def close_send_nowait(self) -> None:
        """Queue END_STREAM after every queued message; never waits (see :meth:`send_nowait`)."""
        core = self._core
        if core.send_closed or core.connection_closed:
            return
        self._queue_batch()
        core.close_send()
        self._write_out()

    def abort(self, error: ConveyorError) -> None:
        """End the stream now with ``error`` and drop the socket without a goodbye (a dead link
        would not carry one): every waiting ``send``, ``recv`` and ``close_send`` wakes up."""
        self._stop_timer()
        self._core.abandon(error)
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.abort()
        self._notify()

    async def aclose(self) -> None:
        """Cancel the stream if still open and close the connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop_timer()
        self._queue_batch()  # they leave before the RST_STREAM, as if queued at once
        self._core.cancel()
        self._write_now()  # RST_STREAM + GOAWAY go out before the close
        self._notify()
        transport = self._transport
        if transport is None:
            return
        transport.close()
        try:
            await asyncio.wait_for(asyncio.shield(self._lost), _CLOSE_WAIT)
        except TimeoutError:
            transport.abort()

    async def __aenter__(self) -> SessionStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ---- internals -----------------------------------------------------------------------------

    async def _send_bytes(self, data: bytes, *, framed: bool) -> None:
        core = self._core
        blocker = core.send_blocker()
        if blocker is not None:
            raise blocker
        self._queue_batch()  # after the send_nowait messages before it
        end = core.queue_message(data, framed=framed)
        self._write_out()
        self.messages_sent += 1
        while core.flushed < end or self._write_paused:
            blocker = core.send_blocker()
            if blocker is not None:
                raise blocker
            await self._wait()

    def _attach(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._write_now()
        if self._keepalive_options is not None:
            self.keepalive = Keepalive(self._keepalive_options, self._clock.monotonic())
            self._core.on_ping_ack = self._on_ping_ack
            self._arm()

    # ---- keepalive -----------------------------------------------------------------------------

    def _arm(self) -> None:
        """(Re)schedule the keepalive timer at the keepalive's next deadline."""
        ka = self.keepalive
        if ka is None or self._closed or self._core.connection_closed:
            return
        at = ka.next_deadline()
        if self._timer is not None:
            if at >= self._timer_at:
                return
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._clock.call_later(at - self._clock.monotonic(), self._on_timer)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        ka, core, transport = self.keepalive, self._core, self._transport
        if ka is None or transport is None or core.connection_closed:
            return
        buffered = transport.get_write_buffer_size()
        if core.unflushed:  # waits for the peer's window: progress is bytes taken into h2
            progress: tuple[str, int] | None = ("window", core.flushed)
        elif buffered:  # waits for the socket: progress is bytes the kernel took
            progress = ("socket", self._written - buffered)
        else:
            progress = None
        action = ka.poll(self._clock.monotonic(), progress)
        if isinstance(action, PingNow):
            core.send_ping(action.payload)
            self._write_now()
        elif isinstance(action, LinkDead):
            log.debug("the connection to the server is dead: %s", action.reason)
            dead = Unavailable(
                f"the connection to the server is dead: {action.reason}", details={"link_dead": True}
            )
            self.abort(dead)  # link_dead: the worker's heal probe may cut its reconnect wait
            return
        self._arm()

    def _on_ping_ack(self, payload: bytes) -> None:
        ka = self.keepalive
        if ka is not None and ka.acked(payload, self._clock.monotonic()):
            self._arm()

    def _write_out(self) -> None:
        # Nothing to write (most reads): no callback, so a job started in this turn runs first.
        if not self._write_scheduled and self._core.wants_write:
            self._write_scheduled = True
            self._loop.call_soon(self._write_now)

    def _write_now(self) -> None:
        self._write_scheduled = False
        self._queue_batch()
        data = self._core.data_to_send()
        transport = self._transport
        if data and transport is not None and not transport.is_closing():
            transport.write(data)
            self._written += len(data)
        if self._core.connection_closed and transport is not None and not transport.is_closing():
            transport.close()

    def _on_data(self, data: bytes) -> None:
        core = self._core
        core.receive_data(data)
        inbox = core.inbox
        if self._listener is not None and (inbox or core.finished):
            self._in_read = True
            try:
                self._listener()
            finally:
                self._in_read = False
        self._write_out()
        if self._signal.waiters:
            self._signal.fire()
        if inbox or core.finished:  # nothing to wake ``recv`` for if the listener took it all
            self._inbound.fire()

    def _on_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        self._core.connection_lost(exc)
        if not self._lost.done():
            self._lost.set_result(None)
        self._notify()

    def _notify(self) -> None:
        self._signal.fire()
        self._inbound.fire()
        if self._listener is not None and self._core.finished:
            self._listener()

    async def _wait(self) -> None:
        await self._signal.wait()


def _invalid(exc: Exception) -> Internal:
    return Internal(f"the server sent a message that is not a valid ServerMessage: {exc}")


async def open_session(
    url: str,
    options: TransportOptions | None = None,
    *,
    path: str = DEFAULT_PATH,
    dialer: _connect.Dialer = _connect.dial_tcp,
    clock: Clock | None = None,
) -> SessionStream:
    """Connect to ``url`` and open the session stream (request HEADERS sent; no response awaited).

    ``http://`` uses h2c with prior knowledge; ``https://`` uses TLS with ALPN ``h2``.
    ``dialer`` opens the connection (TCP by default; tests pass an in-memory one).
    ``clock``: the time the keepalive's PINGs and timeouts follow (its monotonic clock and timers:
    the system's by default; tests pass a virtual one).
    Raises :class:`~conveyor_sdk.errors.Unavailable` when the server cannot be reached and
    :class:`~conveyor_sdk.errors.InvalidArgument` for a bad URL or unreadable TLS files.
    """
    options = options or TransportOptions()
    target = _connect.parse_target(url)
    headers = _connect.request_headers(target, path, options)
    ssl_ctx = _connect.tls_context(options.tls) if target.scheme == "https" else None
    server_hostname = None
    if ssl_ctx is not None:
        server_hostname = (options.tls.server_hostname if options.tls else None) or target.host
    core = SessionCore(options.protocol, max_message=options.max_message)
    core.start(headers)  # queued before connecting: the server may talk first
    stream = SessionStream(core, protocol=options.protocol, keepalive=options.keepalive, clock=clock)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(options.connect_timeout):
            protocol = _BufferedSocketProtocol if wants_buffered(loop) else _SocketProtocol
            transport, _ = await dialer(
                lambda: protocol(stream), target, tls=ssl_ctx, server_hostname=server_hostname
            )
    except ConveyorError:
        raise
    except (OSError, TimeoutError) as exc:
        raise _connect.connect_error(exc, target) from None
    _connect.check_alpn(transport, target)
    _connect.tune_socket(transport, options.keepalive)
    stream._attach(transport)
    return stream
