"""One HTTP/2 connection of the async producer client: many concurrent calls, one per stream.

An :class:`asyncio.Protocol` around the HTTP/2 kernel's client connection
(:mod:`conveyor_sdk._h2kernel`: streams below a graceful GOAWAY may finish; requests and answers
skip h2's generic frame code). It runs on the caller's event loop: a call's
HEADERS and DATA are framed and written in the caller's own turn, and responses are read in the
socket callback, with no thread or task hop either way.

* Streams: :meth:`H2Conn.start` opens one and sends as much of the body as the flow-control
  windows allow (usually all of it, in one ``write``); :meth:`H2Conn.send_rest` sends the rest
  as WINDOW_UPDATEs arrive. New streams wait while ``MAX_CONCURRENT_STREAMS`` are open.
* Inbound data is acknowledged (WINDOW_UPDATE) as the caller consumes it, so a slow reader
  bounds what the server may send ahead.
* A GOAWAY stops new streams (``draining``); streams the server did not process fail with a
  retryable :class:`~conveyor_sdk.errors.Unavailable`, the others may finish. A lost
  connection fails every open stream with Unavailable.
* Keepalive (:mod:`conveyor_sdk._transport.keepalive`): the first call on a connection unused
  for the PING interval sends a PING in the same write as its request (no round trip added);
  while calls are open a PING follows every interval. One unanswered for the keepalive timeout
  fails every open call with Unavailable and drops the socket, so the next call opens a fresh
  connection: a call on a dead link ends within the keepalive bound or its own deadline,
  whichever is first. An idle pooled connection is left alone (no timer runs).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

import h2.config
import h2.events
import h2.exceptions
import h2.settings
from h2.connection import ConnectionState
from h2.errors import ErrorCodes

from conveyor_sdk._client.deadlines import DeadlineTimer
from conveyor_sdk._client.h2stream import HEADS_KEPT, H2Stream, Head, response_head
from conveyor_sdk._h2kernel import probe
from conveyor_sdk._h2kernel.client import PLAIN_CLIENT_CONFIG, client_connection, str_headers
from conveyor_sdk._h2kernel.client_answer import acknowledge
from conveyor_sdk._h2kernel.client_fast import send_request, take_response_frames
from conveyor_sdk._h2kernel.streams import retire_closed
from conveyor_sdk._transport import _status
from conveyor_sdk._transport._connect import Target, tune_socket
from conveyor_sdk._transport.keepalive import Keepalive, KeepaliveOptions, LinkDead, PingNow
from conveyor_sdk._transport.reads import BufferedReads
from conveyor_sdk._transport.signal import Signal
from conveyor_sdk.errors import ConveyorError, Unavailable

__all__ = ["BufferedH2Conn", "H2Conn", "H2Stream"]

log = logging.getLogger("conveyor.client")

STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 1 << 24


class H2Conn(asyncio.Protocol):
    """A client HTTP/2 connection shared by every call of one client (see the module docstring)."""

    def __init__(self, target: Target, keepalive: KeepaliveOptions | None = None) -> None:
        # Callers hand over lower-case names without hop-by-hop fields (H2Transport does), which
        # is all outbound header validation and normalisation would check or fix, so this
        # configuration has both off.
        # Fast codecs: the same request headers call after call, and the same response headers.
        self.h2 = client_connection(PLAIN_CLIENT_CONFIG, fast_codecs=True)
        self.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            },
        )
        self.target = target
        self.streams: dict[int, H2Stream] = {}
        self.transport: asyncio.Transport | None = None
        self.closed = False  # the socket is gone (or going): no more I/O
        self.draining = False  # GOAWAY received or sent: no new streams
        self.loop = asyncio.get_running_loop()  # the loop it runs on: looked up once, not per call
        self.changed = Signal(self.loop)  # windows, settings, a stream closed, writable again
        self.lost: asyncio.Future[None] = self.loop.create_future()
        self._paused = False
        self._seen_input = False
        self.fast_reads = 0  # reads whose frames (some or all) skipped h2's parser (statistics, tests)
        self.fast_sends = 0  # streams opened without h2's send_headers (statistics, tests)
        self._keepalive_options = keepalive
        self.keepalive: Keepalive | None = None  # made once connected
        self._ka_timer: asyncio.TimerHandle | None = None  # armed while calls are open
        self.deadlines = DeadlineTimer(self.streams)  # see watch
        self._heads: dict[tuple[object, ...], Head] = {}  # response header blocks seen, see _on_response

    def __repr__(self) -> str:
        state = "closed" if self.closed else "draining" if self.draining else "open"
        return f"<H2Conn {self.target.authority} {state} streams={len(self.streams)}>"

    # ---- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self.flush()
        if self._keepalive_options is not None:
            self.keepalive = Keepalive(self._keepalive_options, self.loop.time())
            tune_socket(transport, self._keepalive_options)

    def data_received(self, data: bytes) -> None:
        if not self._seen_input:
            self._seen_input = True
            if data.startswith(b"HTTP/1."):
                self._fail(Unavailable("the server answered in HTTP/1.x; it does not speak HTTP/2"))
                return
        try:
            events, used = take_response_frames(self.h2, data)  # ordinary responses skip h2's parser
            if used:
                self.fast_reads += 1
            if used < len(data):
                events += self.h2.receive_data(data[used:] if used else data)
        except h2.exceptions.ProtocolError as exc:
            self._fail(Unavailable(f"the server broke the HTTP/2 protocol: {exc}"))
            return
        except Exception as exc:  # h2 raises ProtocolError for any bad input: anything else is a bug
            log.debug("unexpected error in the HTTP/2 layer", exc_info=True)
            self._fail(probe.internal_error(exc))
            return
        handlers = _HANDLERS
        for event in events:
            handle = handlers.get(type(event)) or _handler(type(event))
            handle(self, event)
        self.flush()
        if len(self.h2.streams) > len(self.streams) and not self.closed:
            retire_closed(self.h2)  # the send path leaves retiring finished streams to the reads
        if self.draining and not self.streams:
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = self.draining = True
        self._disarm()
        self.deadlines.cancel()
        self._fail_streams(_status.connection_error(exc), lambda sid: True)
        if not self.lost.done():
            self.lost.set_result(None)
        self.changed.fire()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self.changed.fire()

    # ---- calls ---------------------------------------------------------------------------------

    def has_capacity(self) -> bool:
        """True when a new stream may be opened now."""
        if self.closed or self.draining:
            return False
        # Our own count (h2's walks every stream): a stream leaves ``streams`` when h2 closes it,
        # or when we reset it.
        return len(self.streams) < self.h2.remote_settings.max_concurrent_streams

    def start(self, headers: list[tuple[str, str]], body: bytes) -> tuple[H2Stream, int]:
        """Open a stream, send HEADERS and what the windows allow of ``body``; return it, bytes sent."""
        if self._ka_timer is None and self.keepalive is not None and not self.closed:
            self._keepalive_on_call()  # the first call since the connection went idle
        try:
            opened = None if self.closed or self.draining else send_request(self.h2, headers, body)
        except probe.KernelFault as exc:
            error = probe.internal_error(exc)
            self._fail(error)
            raise error from None
        if opened is not None:  # the usual case: HEADERS and DATA framed without h2's generic path
            sid, sent = opened
            self.fast_sends += 1
            stream = self.streams[sid] = H2Stream(sid, self.loop)
            if sent < len(body):
                sent = self._send_some(stream, body, sent)
            self.flush()
            return stream, sent
        try:
            sid = self.h2.get_next_available_stream_id()
        except h2.exceptions.NoAvailableStreamIDError:
            self.draining = True
            raise Unavailable("HTTP/2 stream ids exhausted on this connection") from None
        try:
            self.h2.send_headers(sid, headers, end_stream=not body)
        except h2.exceptions.H2Error as exc:  # e.g. the connection closed under us
            self.draining = True
            raise Unavailable(f"cannot open an HTTP/2 stream: {exc}") from None
        stream = self.streams[sid] = H2Stream(sid, self.loop)
        sent = self._send_some(stream, body, 0) if body else 0
        self.flush()
        return stream, sent

    async def send_rest(self, stream: H2Stream, body: bytes, sent: int) -> None:
        """Send ``body[sent:]`` as the peer's flow-control windows open."""
        while sent < len(body):
            if self.closed:
                return
            if stream.done:  # the server answered before taking the whole body: stop sending
                self._reset(stream)
                return
            before = sent
            if not self._paused:
                sent = self._send_some(stream, body, sent)
                self.flush()
            if sent == before or self._paused:
                await self.changed.wait()

    def watch(self, stream: H2Stream, deadline: float) -> None:
        """Set ``stream.timed_out`` and wake its reader once the loop time reaches ``deadline``
        (the connection's one :class:`~conveyor_sdk._client.deadlines.DeadlineTimer`)."""
        self.deadlines.watch(stream, deadline)

    def consumed(self, stream: H2Stream, size: int) -> None:
        """The caller read ``size`` flow-controlled bytes of ``stream``: return them to the server."""
        if self.closed or not size:
            return
        try:
            queued = acknowledge(self.h2, stream.id, size)  # usually only counts the bytes
        except h2.exceptions.H2Error:
            log.debug("could not acknowledge received data", exc_info=True)
            queued = True
        except probe.KernelFault as exc:
            error = probe.internal_error(exc)
            self._fail(error)
            raise error from None
        if queued:
            self.flush()

    def cancel(self, stream: H2Stream) -> None:
        """The caller gave up on ``stream``: RST_STREAM(CANCEL) unless it already ended."""
        self.streams.pop(stream.id, None)
        if not stream.done:
            stream.error = Unavailable("the call was cancelled")
            self._reset(stream)
        self.changed.fire()
        if self.draining and not self.streams:
            self.close()

    def close(self) -> None:
        """Send GOAWAY and close the socket (open streams fail as the connection goes)."""
        self.draining = True
        if self.closed:
            return
        self.closed = True
        try:
            self.h2.close_connection()
        except h2.exceptions.H2Error:
            log.debug("connection already closed", exc_info=True)
        self.flush(force=True)
        if self.transport is not None:
            self.transport.close()

    def flush(self, *, force: bool = False) -> None:
        """Write what h2 has queued (one ``write`` call)."""
        data = self.h2.data_to_send()
        transport = self.transport
        if data and transport is not None and (force or not self.closed) and not transport.is_closing():
            transport.write(data)

    # ---- keepalive -----------------------------------------------------------------------------

    def _keepalive_on_call(self) -> None:
        ka = self.keepalive
        assert ka is not None
        ping = ka.ping_due_on_reuse(self.loop.time())
        if ping is not None:
            self.h2.ping(ping.payload)  # leaves with the request's own write
        self._arm()

    def _arm(self) -> None:
        ka = self.keepalive
        if ka is None or self.closed:
            return
        self._disarm()
        self._ka_timer = self.loop.call_at(ka.next_deadline(), self._on_keepalive_timer)

    def _disarm(self) -> None:
        if self._ka_timer is not None:
            self._ka_timer.cancel()
            self._ka_timer = None

    def _on_keepalive_timer(self) -> None:
        self._ka_timer = None
        ka = self.keepalive
        if ka is None or self.closed or (not self.streams and ka.outstanding is None):
            return  # closed, or idle with nothing to wait for: the next call re-arms
        action = ka.poll(self.loop.time())
        if isinstance(action, LinkDead):
            where = self.target.authority
            self._fail(Unavailable(f"the connection to {where} is dead: {action.reason}"))
            if self.transport is not None:
                self.transport.abort()  # a dead link would never drain the GOAWAY
            return
        if isinstance(action, PingNow):
            self.h2.ping(action.payload)
            self.flush()
        self._arm()

    def _on_ping_ack(self, payload: bytes) -> None:
        ka = self.keepalive
        if ka is not None and ka.acked(payload, self.loop.time()) and self._ka_timer is not None:
            self._arm()  # the next PING is due an interval from now, sooner than the timer

    # ---- internals -----------------------------------------------------------------------------

    def _reset(self, stream: H2Stream) -> None:
        if self.closed:
            return
        try:
            self.h2.reset_stream(stream.id, ErrorCodes.CANCEL)
        except h2.exceptions.H2Error:
            log.debug("stream already closed when resetting", exc_info=True)
        self.flush()

    def _send_some(self, stream: H2Stream, body: bytes, sent: int) -> int:
        conn, sid, total = self.h2, stream.id, len(body)
        try:
            while sent < total:
                window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
                if window <= 0:
                    break
                end = min(total, sent + window)
                conn.send_data(sid, body[sent:end], end_stream=end == total)
                sent = end
        except h2.exceptions.StreamClosedError:
            return total  # the server already ended or reset it; its outcome says why
        return sent

    def _on_data(self, event: h2.events.DataReceived) -> None:
        stream = self.streams.get(event.stream_id or 0)
        size = event.flow_controlled_length or 0
        if stream is None:
            self.h2.acknowledge_received_data(size, event.stream_id or 0)  # a cancelled call's data
        else:
            stream.chunks.append((event.data or b"", size))
            stream.wake.fire()

    def _on_response(self, event: h2.events.ResponseReceived) -> None:
        """The response's headers, as str pairs, split into ``:status`` and the rest.

        A unary client gets the same header block call after call: each distinct one is converted
        once per connection and its (immutable) result shared by the streams that receive it."""
        stream = self.streams.get(event.stream_id or 0)
        if stream is None:
            return
        raw = event.headers or ()
        key = tuple(raw)
        head = self._heads.get(key)
        if head is None:
            head = response_head(raw)
            if len(self._heads) >= HEADS_KEPT:
                self._heads.clear()
            self._heads[key] = head
        stream.headers, stream.status, stream.fields = head
        stream.wake.fire()

    def _on_trailers(self, event: h2.events.TrailersReceived) -> None:
        stream = self.streams.get(event.stream_id or 0)
        if stream is not None:
            stream.trailers = list(str_headers(event.headers).items())
            stream.wake.fire()

    def _on_ended(self, event: h2.events.StreamEnded) -> None:
        stream = self.streams.pop(event.stream_id or 0, None)
        if stream is not None:
            stream.ended = True
            stream.wake.fire()
        self.changed.fire()

    def _on_changed(self, event: h2.events.Event) -> None:
        self.changed.fire()

    def _on_ping(self, event: h2.events.PingAckReceived) -> None:
        self._on_ping_ack(bytes(event.ping_data or b""))

    def _ignore(self, event: h2.events.Event) -> None:
        pass

    def _on_reset(self, event: h2.events.StreamReset) -> None:
        stream = self.streams.pop(event.stream_id or 0, None)
        if stream is not None and not stream.done:
            code = int(event.error_code or 0)
            err = _status.reset_error(code)
            err.message = err.message.replace("session stream", "stream of this call")
            stream.error = err
            stream.wake.fire()
        self.changed.fire()

    def _on_goaway(self, event: h2.events.ConnectionTerminated) -> None:
        self.draining = True
        code = int(event.error_code or 0)
        last = event.last_stream_id if event.last_stream_id is not None else 0
        err = _status.goaway_error(code, event.additional_data)
        if code != 0 or self.h2.state_machine.state is ConnectionState.CLOSED:
            self._fail(err)  # h2 keeps no stream alive: everything open ends here
        else:
            self._fail_streams(err, lambda sid: sid > last)  # not processed: safe to retry elsewhere
        self.changed.fire()

    def _fail_streams(self, error: ConveyorError, which: Callable[[int], bool]) -> None:
        for sid in [sid for sid in self.streams if which(sid)]:
            stream = self.streams.pop(sid)
            if not stream.done:
                stream.error = error
                stream.wake.fire()

    def _fail(self, error: ConveyorError) -> None:
        """A connection-level failure: every open stream fails with ``error``; the socket closes."""
        self._fail_streams(error, lambda sid: True)
        self.close()
        self.changed.fire()


_Handler = Callable[[H2Conn, Any], None]  # each takes its own event class
# What H2Conn does with each kind of h2 event (looked up by the event's exact class).
_HANDLERS: dict[type, _Handler] = {
    h2.events.DataReceived: H2Conn._on_data,
    h2.events.ResponseReceived: H2Conn._on_response,
    h2.events.TrailersReceived: H2Conn._on_trailers,
    h2.events.StreamEnded: H2Conn._on_ended,
    h2.events.StreamReset: H2Conn._on_reset,
    h2.events.ConnectionTerminated: H2Conn._on_goaway,
    h2.events.WindowUpdated: H2Conn._on_changed,
    h2.events.RemoteSettingsChanged: H2Conn._on_changed,
    h2.events.PingAckReceived: H2Conn._on_ping,
}


def _handler(kind: type) -> _Handler:
    """The handler of an event class not in the table: that of a class it derives from, or none."""
    handle = next((h for base, h in _HANDLERS.items() if issubclass(kind, base)), H2Conn._ignore)
    _HANDLERS[kind] = handle
    return handle


class BufferedH2Conn(BufferedReads, H2Conn):
    """:class:`H2Conn` on asyncio's own loop: one ``recv_into`` per read (see ``_transport.reads``)."""
