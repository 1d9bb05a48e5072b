"""Sans-I/O client side of one session stream over HTTP/2 (gRPC or Connect streaming).

Rules of this module:

* Bytes in (:meth:`SessionCore.receive_data`), bytes out (:meth:`SessionCore.data_to_send`).
  No sockets, no asyncio, no clock. The I/O layer calls a method, then writes
  ``data_to_send()`` and wakes whoever waits on the state it exposes.
* One connection carries exactly one request stream.
* Outbound: messages are framed and queued; :meth:`flush` hands h2 as much as the
  peer's flow-control windows allow. ``flushed`` counts bytes handed over, so a
  sender can wait until *its* message left (bounded buffering).
* Inbound: complete messages queue until :meth:`take_message`. Received bytes are
  acknowledged (WINDOW_UPDATE) at once while the unread queue holds at most
  ``recv_high_water`` bytes (so a message larger than the window can complete);
  past that, only when the application reads.
* Terminal outcome: ``finished`` turns True with ``error`` None (clean end) or a
  :class:`ConveyorError`. Queued messages are still delivered before the outcome.
* Every h2 exception is translated here, at this one boundary: peer faults become
  Unavailable/Internal naming the server; our own bugs (the HTTP/2 kernel's included) become
  Internal naming the h2 version (:func:`conveyor_sdk._h2kernel.probe.internal_error`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from conveyor_sdk._h2kernel import probe
from conveyor_sdk._h2kernel.client import client_connection, str_headers
from conveyor_sdk._h2kernel.client_fast import DataFrameTaker
from conveyor_sdk._h2kernel.streams import pending_output
from conveyor_sdk._protocol.framing import (
    FrameDecoder,
    encode_frame,
    error_from_connect_end_stream,
    error_from_grpc_trailers,
)
from conveyor_sdk._transport import _status
from conveyor_sdk.errors import (
    Canceled,
    ConveyorError,
    FailedPrecondition,
    Internal,
    ResourceExhausted,
    Unavailable,
)

__all__ = ["SessionCore"]

log = logging.getLogger("conveyor.transport")

STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 1 << 24
RECV_HIGH_WATER = 4 << 20
# Consumed bytes are handed back to h2 in batches: h2 only sends a WINDOW_UPDATE once half a
# window is consumed, so acknowledging each small Dispatch just runs h2 code on the latency path.
# A batch is far below half of STREAM_WINDOW, so the peer never waits on what we hold back.
ACK_BATCH = 32 << 10


class SessionCore:
    """HTTP/2 connection + one RPC stream + message framing, as a state machine."""

    def __init__(
        self,
        protocol: str = "grpc",
        *,
        max_message: int = 64 * 1024 * 1024,
        recv_high_water: int = RECV_HIGH_WATER,
        fast_data: bool = True,
    ) -> None:
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self._conn = client_connection(config)
        self._conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100,
            },
        )
        self.protocol = protocol
        self.max_message = max_message
        self.stream_id = 0
        self._decoder = FrameDecoder(max_message=max_message)
        self._fast_data = fast_data  # read plain DATA frames without h2's parser (DataFrameTaker)
        self._taker: DataFrameTaker | None = None  # made with the stream
        self.fast_frames = 0
        self._recv_high_water = recv_high_water
        # outbound
        self._out = bytearray()
        self.queued = 0
        self.flushed = 0
        self._end_requested = False
        self.send_closed = False  # END_STREAM sent, or the stream can no longer carry data
        # inbound
        self._messages: deque[bytes] = deque()
        self.inbox = self._messages  # read-only outside: complete messages not yet taken
        self._queued_bytes = 0
        self._unacked = 0
        self.status: int | None = None
        self.response_headers: dict[str, str] | None = None
        self.trailers: dict[str, str] = {}
        self._error_body: bytearray | None = None
        self._remote_ended = False
        # outcome
        self.finished = False
        self.error: ConveyorError | None = None
        self.connection_closed = False
        self.goaway_received = False
        self._seen_input = False
        # Called with each PING acknowledgement's payload (the keepalive: see SessionStream).
        self.on_ping_ack: Callable[[bytes], None] | None = None
        self._handlers: dict[type[h2.events.Event], Callable[[h2.events.Event], None]] = {
            h2.events.ResponseReceived: self._on_response,
            h2.events.DataReceived: self._on_data,
            h2.events.TrailersReceived: self._on_trailers,
            h2.events.StreamEnded: self._on_stream_ended,
            h2.events.StreamReset: self._on_reset,
            h2.events.ConnectionTerminated: self._on_goaway,
            h2.events.PingAckReceived: self._on_ping_ack,
        }

    def __repr__(self) -> str:
        return (
            f"<SessionCore {self.protocol} stream={self.stream_id} status={self.status} "
            f"queued={self.queued} flushed={self.flushed} unread={len(self._messages)} "
            f"finished={self.finished} error={self.error!r}>"
        )

    # ---- opening -------------------------------------------------------------------------------

    def start(self, headers: Sequence[tuple[str, str]]) -> None:
        """Queue the connection preface, our SETTINGS and the request HEADERS."""
        self._conn.initiate_connection()
        self._conn.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self.stream_id = self._conn.get_next_available_stream_id()
        if self._fast_data:
            self._taker = DataFrameTaker(self._conn, self.stream_id)
        self._conn.send_headers(self.stream_id, list(headers))

    def data_to_send(self) -> bytes:
        """Bytes the I/O layer must write to the socket now (may be empty)."""
        return self._conn.data_to_send()

    @property
    def wants_write(self) -> bool:
        """Whether the I/O layer has anything to do: bytes to write, or a connection to close.

        False for most reads (a Dispatch is acknowledged in batches), so the I/O layer can skip
        scheduling a write that would find nothing. On the kernel's public path, which cannot look
        into h2's output, it always says True.
        """
        return pending_output(self._conn) != 0 or self.connection_closed

    # ---- outbound ------------------------------------------------------------------------------

    def send_ping(self, payload: bytes) -> None:
        """Queue a PING (8 bytes of ``payload``); its acknowledgement goes to ``on_ping_ack``."""
        if self.connection_closed:
            return
        try:
            self._conn.ping(payload)
        except h2.exceptions.H2Error:
            log.debug("cannot send a PING on this connection", exc_info=True)

    @property
    def unflushed(self) -> bool:
        """Whether queued message bytes (or the END_STREAM after them) wait for flow-control window."""
        return bool(self._out) or (self._end_requested and not self.send_closed)

    def send_blocker(self) -> ConveyorError | None:
        """Why a new message cannot be sent, or None when it can."""
        if self._end_requested:
            return FailedPrecondition("this client already half-closed the session stream")
        if self.send_closed or self.connection_closed or (self.finished and self._remote_ended):
            if self.error is not None:
                return self.error
            return Unavailable("the session stream has ended")
        return None

    def frame_message(self, payload: bytes) -> bytes:
        """``payload`` with its gRPC length prefix; raises ResourceExhausted past ``max_message``."""
        if len(payload) > self.max_message:
            raise ResourceExhausted(
                f"message of {len(payload)} bytes exceeds the limit of {self.max_message} bytes"
            )
        return encode_frame(payload)

    def queue_message(self, payload: bytes, *, framed: bool = False) -> int:
        """Frame ``payload`` (unless already framed), queue and flush it; return its end offset."""
        data = payload if framed else self.frame_message(payload)
        self._out += data
        self.queued += len(data)
        self.flush()
        return self.queued

    def close_send(self) -> None:
        """Half-close: END_STREAM after every queued byte went out."""
        if not self._end_requested and not self.send_closed:
            self._end_requested = True
            self.flush()

    def flush(self) -> None:
        """Move queued bytes into h2 as far as the flow-control windows allow."""
        if self.send_closed or self.connection_closed:
            return
        try:
            self._flush()
        except h2.exceptions.StreamClosedError:
            self.send_closed = True
        except h2.exceptions.H2Error as exc:
            self._fail(Internal(f"this client misused HTTP/2 while sending: {exc}"), connection=True)

    def _flush(self) -> None:
        conn, sid, out = self._conn, self.stream_id, self._out
        while out:
            window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            if window <= 0:
                return
            n = min(window, len(out))
            conn.send_data(sid, bytes(out[:n]))
            del out[:n]
            self.flushed += n
        if self._end_requested:
            conn.end_stream(sid)
            self.send_closed = True

    # ---- inbound -------------------------------------------------------------------------------

    def take_message(self) -> bytes | None:
        """Pop the next complete message (acknowledging its bytes), or None if none is queued."""
        if not self._messages:
            return None
        data = self._messages.popleft()
        self._queued_bytes -= len(data) + 5
        if self._unacked >= ACK_BATCH and self._queued_bytes <= self._recv_high_water:
            self._ack()
        return data

    @property
    def remote_ended(self) -> bool:
        """True once the server closed its side of the stream (END_STREAM or RST_STREAM)."""
        return self._remote_ended

    @property
    def unread(self) -> int:
        """Number of complete messages queued for the application."""
        return len(self._messages)

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the socket."""
        if self.connection_closed:
            return
        if not self._seen_input and self._answered_in_http1(data):
            return
        taker = self._taker
        if taker is not None and self.status == 200 and self._error_body is None and not self.finished:
            try:
                payloads, used = taker.take(data)
            except probe.KernelFault as exc:
                self._fail(probe.internal_error(exc), connection=True)
                return
            self.fast_frames += len(payloads)
            for payload in payloads:  # the hot path: messages straight from DATA frames
                self._on_payload(payload, len(payload))
            if used:
                data = data[used:]
                if not data:  # DATA frames move no send window: only pending output needs a flush
                    if self._out or self._end_requested:
                        self.flush()
                    return
        self._receive_h2(data)

    def _receive_h2(self, data: bytes) -> None:
        try:
            events = self._conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self._fail(Unavailable(f"the server broke the HTTP/2 protocol: {exc}"), connection=True)
            return
        except Exception as exc:  # h2 raises ProtocolError for any bad input: anything else is a bug
            log.debug("unexpected error in the HTTP/2 layer", exc_info=True)
            self._fail(probe.internal_error(exc), connection=True)
            return
        for event in events:
            handler = self._handlers.get(type(event))
            if handler is not None:
                handler(event)
        self.flush()

    def _answered_in_http1(self, data: bytes) -> bool:
        """On the first read: fail at once if the server answered in HTTP/1.x (True)."""
        self._seen_input = True
        if data.startswith(b"HTTP/1."):  # h2 would wait for a 4 MiB "frame"; say what happened now
            self._fail(
                Unavailable("the server answered in HTTP/1.x; it does not speak HTTP/2"), connection=True
            )
            return True
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        """The socket closed (EOF or error)."""
        if not self.finished:
            self._fail(_status.connection_error(exc), connection=True)
        self.connection_closed = True
        self.send_closed = True

    # ---- local termination ---------------------------------------------------------------------

    def abandon(self, error: ConveyorError) -> None:
        """Give the connection up without a word to the peer (it no longer answers): terminal ``error``."""
        self._fail(error, connection=True)

    def cancel(self, message: str = "the session stream was closed by this client") -> None:
        """RST_STREAM(CANCEL) if the stream is still open, then GOAWAY; terminal Canceled."""
        if not self.connection_closed and self.stream_id:
            try:
                if not (self.send_closed and self._remote_ended):
                    self._conn.reset_stream(self.stream_id, ErrorCodes.CANCEL)
                self._conn.close_connection()
            except h2.exceptions.H2Error:
                log.debug("stream already closed when cancelling", exc_info=True)
        self._fail(Canceled(message), connection=True)

    # ---- h2 event handlers ---------------------------------------------------------------------

    def _on_response(self, event: h2.events.Event) -> None:
        assert isinstance(event, h2.events.ResponseReceived)
        headers = str_headers(event.headers)
        self.response_headers = headers
        try:
            self.status = int(headers.get(":status", "0"))
        except ValueError:
            self.status = 0
        if self.status != 200:
            self._error_body = bytearray()
            return
        err, trailers_only = _status.response_headers_error(self.protocol, headers)
        if trailers_only:
            self.trailers = headers
        if err is not None or trailers_only:
            self._finish(err)

    def _on_data(self, event: h2.events.Event) -> None:
        assert isinstance(event, h2.events.DataReceived)
        self._on_payload(event.data or b"", event.flow_controlled_length or 0)

    def _on_payload(self, data: bytes, size: int) -> None:
        """One DATA frame's payload (``size``: its flow-controlled length), from h2 or the fast path."""
        if self._error_body is not None:
            if len(self._error_body) < _status.max_error_body():
                self._error_body += data
            self._unacked += size
            self._ack()
            return
        if self.finished:  # the outcome is known; later data is dropped (but its window returned)
            self._unacked += size
            self._ack()
            return
        self._unacked += size
        try:
            frames = self._decoder.feed(data)
        except ResourceExhausted as exc:
            self._fail_stream(ResourceExhausted(f"the server sent a too large message: {exc.message}"))
            return
        except ConveyorError as exc:
            self._fail_stream(Internal(f"the server sent a malformed message: {exc.message}"))
            return
        for frame in frames:
            if frame.flags == 0:
                self._messages.append(frame.data)
                self._queued_bytes += len(frame.data) + 5
            elif self.protocol == "connect" and frame.end_stream:
                self._on_connect_end(frame.data)
                break  # anything after the end-of-stream message is ignored: the outcome stands
            else:
                self._fail_stream(
                    Internal(f"the server sent a message with unknown flags 0x{frame.flags:02x}")
                )
                return
        if self._unacked >= ACK_BATCH and self._queued_bytes <= self._recv_high_water:
            self._ack()

    def _on_connect_end(self, payload: bytes) -> None:
        err = error_from_connect_end_stream(payload)
        self._finish(err)

    def _on_trailers(self, event: h2.events.Event) -> None:
        assert isinstance(event, h2.events.TrailersReceived)
        self.trailers = str_headers(event.headers)
        if self.protocol == "grpc" and not self.finished:
            self._finish(error_from_grpc_trailers(self.trailers))

    def _on_stream_ended(self, event: h2.events.Event) -> None:
        self._remote_ended = True
        if self._error_body is not None:
            ctype = (self.response_headers or {}).get("content-type", "")
            self._finish(_status.http_status_error(self.status or 0, bytes(self._error_body), ctype))
        elif self.finished:
            return
        elif self._decoder.pending:
            self._finish(Internal("the server ended the stream in the middle of a message"))
        elif self.protocol == "grpc":
            self._finish(Internal("the server ended the stream without a grpc-status"))
        else:
            self._finish(Internal("the server ended the stream without a Connect end-of-stream message"))

    def _on_reset(self, event: h2.events.Event) -> None:
        assert isinstance(event, h2.events.StreamReset)
        self.send_closed = True
        self._remote_ended = True
        if not self.finished:
            self._finish(_status.reset_error(int(event.error_code or 0)))

    def _on_goaway(self, event: h2.events.Event) -> None:
        assert isinstance(event, h2.events.ConnectionTerminated)
        self.goaway_received = True
        code = int(event.error_code or 0)
        last = event.last_stream_id if event.last_stream_id is not None else 0
        if code != 0 or last < self.stream_id:
            self._fail(_status.goaway_error(code, event.additional_data), connection=True)
        # else: a graceful GOAWAY covering our stream; the server may still finish it (see _h2.Connection).

    def _on_ping_ack(self, event: h2.events.Event) -> None:
        assert isinstance(event, h2.events.PingAckReceived)
        if self.on_ping_ack is not None:
            self.on_ping_ack(bytes(event.ping_data or b""))

    # ---- helpers -------------------------------------------------------------------------------

    def _ack(self) -> None:
        if not self._unacked or self.connection_closed:
            return
        try:
            self._conn.acknowledge_received_data(self._unacked, self.stream_id)
        except h2.exceptions.H2Error:
            log.debug("could not acknowledge received data", exc_info=True)
        self._unacked = 0

    def _finish(self, error: ConveyorError | None) -> None:
        if not self.finished:
            self.finished = True
            self.error = error

    def _fail(self, error: ConveyorError, *, connection: bool = False) -> None:
        self._finish(error)
        if connection:
            self.connection_closed = True
            self.send_closed = True

    def _fail_stream(self, error: ConveyorError) -> None:
        """We give up on the stream because of what the server sent: reset it and stop."""
        self._finish(error)
        try:
            self._conn.reset_stream(self.stream_id, ErrorCodes.CANCEL)
        except h2.exceptions.H2Error:
            log.debug("stream already closed when resetting", exc_info=True)
        self.send_closed = True
