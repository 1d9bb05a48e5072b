"""The server's h2 connection: settings, the refusing rule, the frame guard, fast sends and acks.

:func:`new_server_h2` builds the connection for the path the kernel is on. Fast path: h2's private
HEADERS hook refuses a stream beyond our limit, :class:`.guard.GuardedFrameBuffer` guards h2's own
frame parse, :class:`.hpackfast.FastDecoder` reads common header blocks. Public path: the refusing
rule and the guard see each frame's header before h2 parses it (:class:`.guard.PublicGuardBuffer`),
and h2's own HPACK decoder runs.
"""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
from h2.connection import ConnectionState
from h2.stream import STREAM_OPEN, StreamClosedBy, StreamState
from h2.windows import WindowManager

from conveyor_sdk._h2kernel import probe
from conveyor_sdk._h2kernel.guard import GuardedFrameBuffer, PublicGuardBuffer
from conveyor_sdk._h2kernel.hpackfast import FastDecoder

__all__ = [
    "SERVER_CONFIG",
    "RefusingConnection",
    "acknowledge",
    "new_server_h2",
    "release",
    "send_data",
    "send_unary",
]

_WRITABLE = (StreamState.OPEN, StreamState.HALF_CLOSED_REMOTE)
# A settings value read from h2's store: the property and __getitem__ behind it cost two calls.
_INITIAL_WINDOW = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE

# Header validation/normalisation in h2 is off: we read only a few headers and build our own
# responses (framing is still checked).
# One object for every connection (h2 only reads it): the fast request path knows by its
# identity that received headers need no processing.
SERVER_CONFIG = h2.config.H2Configuration(
    client_side=False,
    header_encoding=None,
    validate_inbound_headers=False,
    normalize_inbound_headers=False,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
)


class RefusingConnection(h2.connection.H2Connection):
    """h2 treats a stream beyond MAX_CONCURRENT_STREAMS as a connection error; refuse it instead.

    The stream is let through h2 (its header block must still be decoded: HPACK state) with the
    open-stream count read as 0, then reset with REFUSED_STREAM and its events dropped. Fast path:
    in h2's private HEADERS hook. Public path: :class:`.guard.PublicGuardBuffer` sees the HEADERS
    frame's header first and calls :meth:`refuse_next`; :meth:`receive_data` resets afterwards.
    """

    _bypass_limit = False
    unanswered = 0  # a request taken whole without an h2 stream (see server.take_unary), or 0
    stream_limit = 0  # SETTINGS_MAX_CONCURRENT_STREAMS we announce (set by new_server_h2)
    _refused: list[int] | None = None

    @property
    def open_inbound_streams(self) -> int:
        if self._bypass_limit:
            return 0
        return super().open_inbound_streams

    def _receive_headers_frame(self, frame: Any) -> Any:
        if isinstance(self.incoming_buffer, PublicGuardBuffer):  # a connection made on the public path
            return super()._receive_headers_frame(frame)
        if frame.stream_id in self.streams or frame.stream_id <= self.highest_inbound_stream_id:
            return super()._receive_headers_frame(frame)
        if super().open_inbound_streams < self.local_settings.max_concurrent_streams:
            return super()._receive_headers_frame(frame)
        self._bypass_limit = True
        try:
            frames, events = super()._receive_headers_frame(frame)
        finally:
            self._bypass_limit = False
        self.reset_stream(frame.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
        return frames, [e for e in events if getattr(e, "stream_id", None) != frame.stream_id]

    # ---- public path ---------------------------------------------------------------------------
    def before_frame(self, kind: int, stream_id: int) -> None:
        """The guard is about to hand h2 the next frame (public path)."""
        if kind == 0x9:
            return  # a CONTINUATION: h2 reads the header block when its last one arrives
        self._bypass_limit = False
        if kind != 0x1 or stream_id in self.streams or stream_id <= self.highest_inbound_stream_id:
            return
        if super().open_inbound_streams >= self.local_settings.max_concurrent_streams:
            self._bypass_limit = True
            if self._refused is None:
                self._refused = []
            self._refused.append(stream_id)

    def receive_data(self, data: Any) -> list[h2.events.Event]:
        if not isinstance(self.incoming_buffer, PublicGuardBuffer):
            return super().receive_data(data)
        try:
            events = super().receive_data(data)
        finally:
            self._bypass_limit = False
        refused, self._refused = self._refused, None
        if not refused:
            return events
        for stream_id in refused:
            if stream_id in self.streams:
                self.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
        return [e for e in events if getattr(e, "stream_id", None) not in refused]


def new_server_h2(
    *, max_streams: int, stream_window: int, max_header_bytes: int, max_empty_frames: int
) -> tuple[RefusingConnection, GuardedFrameBuffer | PublicGuardBuffer]:
    """The h2 state of one server connection: our settings, a guarded frame buffer, fast HPACK."""
    conn = RefusingConnection(config=SERVER_CONFIG)
    conn.local_settings = h2.settings.Settings(
        client=False,
        initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: max_streams,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: stream_window,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: max_header_bytes,
            h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL: 0,
        },
    )
    frames: GuardedFrameBuffer | PublicGuardBuffer
    if probe.fast:
        frames = GuardedFrameBuffer(max_header_bytes=max_header_bytes, max_empty_frames=max_empty_frames)
        conn.decoder = FastDecoder()  # hpack's decoder with a fast path (a fresh table: no state yet)
    else:
        frames = PublicGuardBuffer(
            max_header_bytes=max_header_bytes, max_empty_frames=max_empty_frames, before=conn.before_frame
        )
    conn.incoming_buffer = frames
    conn.stream_limit = max_streams  # what we announce; h2's own value may still be the default
    conn.decoder.max_header_list_size = max_header_bytes
    return conn, frames


def release(frames: GuardedFrameBuffer | PublicGuardBuffer) -> None:
    """Drop the bytes a closed connection's frame buffer holds (h2's connection object is a reference
    cycle, freed only by the cyclic GC; its buffer need not wait for that)."""
    if isinstance(frames, GuardedFrameBuffer) and probe.fast:
        frames._data = bytearray()


def send_data(conn: h2.connection.H2Connection, stream_id: int, data: bytes | bytearray, end: bool) -> None:
    """``conn.send_data(stream_id, data, end_stream=end)``, with the frame written directly when it is
    a plain DATA frame (no END_STREAM, no padding) on a stream open for sending that fits both windows
    and the frame size: h2 would only check, build, serialize and charge the windows (its state
    machines do not move for such a frame). Anything else, and every error, is h2's.
    """
    size = len(data)
    stream = conn.streams.get(stream_id)
    if (
        not probe.fast
        or end
        or not size
        or stream is None
        or conn.state_machine.state is not ConnectionState.SERVER_OPEN
        or stream.state_machine.state not in _WRITABLE
        or size > stream.outbound_flow_control_window
        or size > conn.outbound_flow_control_window
        or size > conn.max_outbound_frame_size
    ):
        conn.send_data(stream_id, bytes(data), end_stream=end)
        return
    out = conn._data_to_send
    out += size.to_bytes(3, "big") + b"\0\0" + stream_id.to_bytes(4, "big")
    out += data
    stream.outbound_flow_control_window -= size
    conn.outbound_flow_control_window -= size


def acknowledge(conn: h2.connection.H2Connection, stream_id: int, size: int) -> bool:
    """``conn.acknowledge_received_data(size, stream_id)``, with the bytes only counted when that would
    reopen neither the connection's window nor the stream's (h2 hands space back only once half a
    window or so is consumed, so for most reads it only counts). Anything else, and every error, is
    h2's. Returns whether a WINDOW_UPDATE may now wait to be sent (always True on the public path,
    which cannot look).
    """
    if not probe.fast:
        conn.acknowledge_received_data(size, stream_id)
        return True
    stream = conn.streams.get(stream_id)
    connection = conn._inbound_flow_control_window_manager
    if size <= 0 or _reopens(connection, size):
        return _through_h2(conn, stream_id, size)
    if stream is None:
        if stream_id > conn.highest_inbound_stream_id:
            return _through_h2(conn, stream_id, size)  # h2 raises NoSuchStreamError
        connection._bytes_processed += size  # a closed (or taken) stream: h2 counts the connection only
        return False
    own = stream._inbound_window_manager if STREAM_OPEN[stream.state_machine.state] else None
    if own is not None and _reopens(own, size):
        return _through_h2(conn, stream_id, size)
    connection._bytes_processed += size
    if own is not None:
        own._bytes_processed += size
    return False


def _through_h2(conn: h2.connection.H2Connection, stream_id: int, size: int) -> bool:
    queued = len(conn._data_to_send)
    conn.acknowledge_received_data(size, stream_id)
    return len(conn._data_to_send) != queued


def _reopens(window: WindowManager, size: int) -> bool:
    """Whether ``window.process_bytes(size)`` would return an increment (h2's _maybe_update_window)."""
    processed = window._bytes_processed + size
    return (
        window.current_window_size == 0 and processed > min(1024, window.max_window_size // 4)
    ) or processed >= window.max_window_size // 2


_STATUS_200 = b"\x88"  # HPACK: indexed field, static table entry 8 (:status 200)
_CONTENT_TYPE = b"\x0f\x10"  # literal without indexing, name = static entry 31 (content-type)
_CONTENT_LENGTH = b"\x0f\x0d"  # literal without indexing, name = static entry 28 (content-length)
_HALF_CLOSED_REMOTE = StreamState.HALF_CLOSED_REMOTE
_HEADER_PREFIX: dict[str, bytes] = {}  # content type -> its :status and content-type fields, encoded once


def _literal(value: bytes) -> bytes:
    return bytes([len(value)]) + value  # a plain string; the callers keep values under 127 bytes


def send_unary(conn: h2.connection.H2Connection, stream_id: int, content_type: str, body: bytes) -> bool:
    """A whole unary answer, ``:status 200`` with content-type and content-length and the body in one
    DATA frame with END_STREAM, written directly; False (nothing changed) unless that is plain.

    Plain: the fast path, a request that has ended (HALF_CLOSED_REMOTE) with no answer yet, a body
    that fits both windows and one frame, and an HPACK encoder that owes no table-size update. The
    fields are literals without indexing, so the HPACK table stays h2's; the stream moves as h2's
    send_headers + send_data(end_stream=True) move it (to CLOSED, closed by SEND_END_STREAM). h2
    would also validate the fields, encode them and run both state machines: about a third of the
    server's CPU for a unary Enqueue. A request :func:`.server.take_unary` took (no h2 stream yet)
    is answered the same way, see :func:`_answer_taken`.
    """
    if not probe.fast:
        return False
    stream = conn.streams.get(stream_id)
    if stream is None:  # none yet (a request taken whole), or gone
        return stream_id == getattr(conn, "unanswered", 0) and _answer_taken(
            conn, stream_id, content_type, body
        )
    machine = stream.state_machine
    size = len(body)
    if (
        machine.state is not _HALF_CLOSED_REMOTE
        or machine.headers_sent
        or machine.client is not False
        or conn.state_machine.state is not ConnectionState.SERVER_OPEN
        or conn.encoder.header_table.resized
        or size > stream.outbound_flow_control_window
        or size > conn.outbound_flow_control_window
        or size > conn.max_outbound_frame_size
        or len(content_type) > 100
    ):
        return False
    _write_unary(conn, stream_id, content_type, body)
    machine.headers_sent = True
    machine.state = StreamState.CLOSED
    machine.stream_closed_by = StreamClosedBy.SEND_END_STREAM
    stream.outbound_flow_control_window -= size
    return True


def _answer_taken(conn: Any, stream_id: int, content_type: str, body: bytes) -> bool:
    """send_unary for a request :func:`.server.take_unary` took: h2 never had its stream, so it
    is recorded as h2 records a stream it retires after that answer (closed by SEND_END_STREAM)."""
    size = len(body)
    if (
        conn.state_machine.state is not ConnectionState.SERVER_OPEN
        or conn.encoder.header_table.resized
        or size > conn.remote_settings._settings[_INITIAL_WINDOW][0]  # initial_window_size (checks.py)
        or size > conn.outbound_flow_control_window
        or size > conn.max_outbound_frame_size
        or len(content_type) > 100
    ):
        return False
    _write_unary(conn, stream_id, content_type, body)
    conn._closed_streams[stream_id] = StreamClosedBy.SEND_END_STREAM
    conn.unanswered = 0
    return True


def _write_unary(conn: Any, stream_id: int, content_type: str, body: bytes) -> None:
    """The HEADERS and DATA(END_STREAM) frames of a plain answer; charges the connection window."""
    size = len(body)
    prefix = _HEADER_PREFIX.get(content_type)
    if prefix is None:
        if len(_HEADER_PREFIX) >= 16:
            _HEADER_PREFIX.clear()
        prefix = _HEADER_PREFIX[content_type] = _STATUS_200 + _CONTENT_TYPE + _literal(content_type.encode())
    length = str(size).encode()
    block = prefix + _CONTENT_LENGTH + bytes((len(length),)) + length  # as _literal
    sid = stream_id.to_bytes(4, "big")
    out = conn._data_to_send
    out += len(block).to_bytes(3, "big") + b"\x01\x04" + sid + block  # HEADERS, END_HEADERS
    out += size.to_bytes(3, "big") + b"\x00\x01" + sid + body  # DATA, END_STREAM
    conn.outbound_flow_control_window -= size
