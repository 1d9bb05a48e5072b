"""Read the frames of an ordinary request without h2's generic frame parser.

The latency path of a task starts with a unary Enqueue: one read holding a HEADERS
frame and a DATA frame with END_STREAM. h2 turns each frame into a hyperframe
object, formats its ``repr`` for a trace log nobody reads, runs the connection's
state machine, counts open streams and decodes HPACK field by field: work that
changes nothing for such frames, on the way from the producer's socket to the worker's.

:func:`take_frames` handles the frames at the start of a read that need nothing
unusual and leaves every other frame, and everything after it, to h2:

* a HEADERS frame with END_HEADERS (END_STREAM allowed; no padding, no priority)
  opening a new client stream while fewer than SETTINGS_MAX_CONCURRENT_STREAMS
  are open, whose header block :meth:`FastDecoder.decode_cached` reads without
  changing HPACK state;
* a DATA frame (END_STREAM allowed, no padding) on a stream that is open for
  reading.

Each one lands in h2's own stream objects (an ``h2.stream.H2Stream`` per request) and
charges the connection window, so the stream states, windows, content-length checks and
events are h2's; what is skipped is the parsing, the connection state machine (a no-op
for these frames in SERVER_OPEN) and the logging. The frame guard's budget and
empty-frame count are kept as :class:`GuardedFrameBuffer` keeps them. A protocol error
raised by a stream ends the connection exactly as in
``h2.connection.H2Connection.receive_data``. It reads h2 (4.x) internals; should they
change, it takes nothing.

The common stream steps (a request's headers opening an idle stream, data on an OPEN
stream within its window and content-length, END_STREAM on either) are applied here
directly, as the three rows of h2's stream transition table they are (checked against
that table at import: :data:`_OWN_TRANSITIONS`). Anything else (a ``:status`` header,
a half-closed stream, a window or content-length violation) goes through h2's
``receive_headers`` / ``receive_data``, which raise where they must.
"""

from __future__ import annotations

from typing import Any

import h2.connection
import h2.events
import h2.exceptions
import h2.stream
from h2.connection import ConnectionState
from h2.events import DataReceived, RequestReceived, StreamEnded
from h2.stream import H2Stream, H2StreamStateMachine, StreamInputs, StreamState

from conveyor_sdk._h2kernel import probe
from conveyor_sdk._h2kernel.guard import HEADER_COST, GuardedFrameBuffer
from conveyor_sdk._h2kernel.hpackfast import FastDecoder
from conveyor_sdk._h2kernel.server_conn import _INITIAL_WINDOW, SERVER_CONFIG, RefusingConnection
from conveyor_sdk._h2kernel.streams import new_stream

__all__ = ["open_taken", "take_frames", "take_unary"]

_DATA, _HEADERS = 0x0, 0x1
_END_STREAM, _END_HEADERS = 0x1, 0x4
_READABLE = (StreamState.OPEN, StreamState.HALF_CLOSED_LOCAL)
_MAX_STREAM_ID = 0x7FFFFFFF  # a set reserved bit is h2's business
_OPEN, _HALF_CLOSED_REMOTE = StreamState.OPEN, StreamState.HALF_CLOSED_REMOTE
# The rows of h2's stream transition table that _open_request / _take_data apply themselves.
_transitions: dict[Any, Any] = getattr(h2.stream, "_transitions", {})
_OWN_TRANSITIONS = (
    _transitions.get((StreamState.IDLE, StreamInputs.RECV_HEADERS))
    == (
        H2StreamStateMachine.request_received,
        _OPEN,
    )
    and _transitions.get((_OPEN, StreamInputs.RECV_DATA))
    == (
        H2StreamStateMachine.data_received,
        _OPEN,
    )
    and _transitions.get((_OPEN, StreamInputs.RECV_END_STREAM))
    == (
        H2StreamStateMachine.stream_half_closed,
        _HALF_CLOSED_REMOTE,
    )
)


def take_frames(
    conn: h2.connection.H2Connection, buffer: GuardedFrameBuffer, data: bytes
) -> tuple[list[h2.events.Event], int]:
    """Events of the ordinary frames at the start of ``data`` and how many bytes they used.

    The caller hands ``data[used:]`` to ``conn.receive_data``. Raises h2's ``ProtocolError``
    (after queueing the GOAWAY) where h2 would.
    """
    if not probe.fast:
        return [], 0
    try:
        if (
            buffer._data  # part of an earlier frame is waiting
            or buffer._headers_buffer  # a header block waits for CONTINUATION
            or buffer._preamble_len
            or conn.state_machine.state is not ConnectionState.SERVER_OPEN
            or not isinstance(conn.decoder, FastDecoder)
        ):
            return [], 0
        events: list[h2.events.Event] = []
        offset, size = 0, len(data)
        limit = conn.max_inbound_frame_size
        try:
            while size - offset >= 9 and buffer.budget > 0:
                length = int.from_bytes(data[offset : offset + 3], "big")
                end = offset + 9 + length
                if end > size or length > limit:
                    break
                kind, flags = data[offset + 3], data[offset + 4]
                stream_id = int.from_bytes(data[offset + 5 : offset + 9], "big")
                payload = data[offset + 9 : end]
                if kind == _DATA:
                    got = _data(conn, buffer, (stream_id, flags), payload)
                elif kind == _HEADERS:
                    got = _headers(conn, buffer, (stream_id, flags), payload)
                else:
                    break
                if got is None:
                    break
                events += got
                offset = end
        except h2.exceptions.ProtocolError as exc:
            conn._terminate_connection(exc.error_code)  # as h2's receive_data does
            raise
        return events, offset
    except h2.exceptions.ProtocolError:
        raise
    except Exception as exc:
        raise probe.KernelFault("take_frames") from exc


def _data(
    conn: h2.connection.H2Connection, buffer: GuardedFrameBuffer, frame: tuple[int, int], payload: bytes
) -> list[Any] | None:
    stream_id, flags = frame
    if flags & ~_END_STREAM or not (payload or flags):
        return None  # padding, unknown flags, or an empty frame the guard must count
    stream = conn.streams.get(stream_id)
    if stream is None or stream.state_machine.state not in _READABLE:
        return None
    buffer.budget -= 1
    buffer.empty_frames = 0
    length = len(payload)
    conn._inbound_flow_control_window_manager.window_consumed(length)
    events = _take_data(stream, payload, bool(flags))
    if events is not None:
        return events
    frames, events = stream.receive_data(payload, bool(flags), length)
    conn._prepare_for_sending(frames)  # none for these frames; kept for exactness
    return events


def _take_data(stream: H2Stream, payload: bytes, end: bool) -> list[Any] | None:
    """``stream.receive_data`` for unpadded data on an OPEN stream that fits its window and
    content-length; None (nothing changed) for anything else."""
    machine = stream.state_machine
    windows = stream._inbound_window_manager
    length = len(payload)
    expected = stream._expected_content_length
    actual = stream._actual_content_length + length
    if (
        not _OWN_TRANSITIONS
        or machine.state is not _OPEN
        or not machine.headers_received
        or length > windows.current_window_size
        or (expected is not None and (expected < actual or (end and expected != actual)))
    ):
        return None
    windows.current_window_size -= length
    stream._actual_content_length = actual
    event = DataReceived(stream_id=stream.stream_id)
    events: list[Any] = [event]
    if end:
        machine.state = _HALF_CLOSED_REMOTE
        event.stream_ended = ended = StreamEnded(stream_id=stream.stream_id)
        events.append(ended)
    event.data = payload
    event.flow_controlled_length = length
    return events


def _headers(
    conn: h2.connection.H2Connection, buffer: GuardedFrameBuffer, frame: tuple[int, int], block: bytes
) -> list[Any] | None:
    stream_id, flags = frame
    if (
        flags & ~(_END_STREAM | _END_HEADERS)
        or not flags & _END_HEADERS
        or not stream_id & 1
        or stream_id <= conn.highest_inbound_stream_id
        or stream_id > _MAX_STREAM_ID
        or len(block) > buffer.max_header_bytes
    ):
        return None
    headers = conn.decoder.decode_cached(block)  # type: ignore[attr-defined]  # a FastDecoder
    if headers is None:
        return None
    # Fewer streams held than our own limit: fewer open, so h2's count (a walk over every stream
    # that also retires the closed ones) is not needed here; the connection retires
    # them once the read's output is written (retire_closed).
    if len(conn.streams) >= getattr(conn, "stream_limit", 0) and (
        conn.open_inbound_streams >= conn.local_settings.max_concurrent_streams
    ):
        return None  # the refusing path (RST_STREAM REFUSED_STREAM) is h2's
    buffer.budget -= HEADER_COST
    stream = new_stream(conn, stream_id)
    conn.highest_inbound_stream_id = stream_id
    end = bool(flags & _END_STREAM)
    if _OWN_TRANSITIONS and conn.config is SERVER_CONFIG:
        events = _open_request(stream, headers, end)
        if events is not None:
            return events
    frames, events = stream.receive_headers(headers, end, conn.config.header_encoding)
    conn._prepare_for_sending(frames)
    return events


def _open_request(stream: H2Stream, headers: list[Any], end: bool) -> list[Any] | None:
    """``stream.receive_headers`` (no header processing configured) for a request on a new stream;
    None (nothing changed) when a ``:status`` field makes it something h2 must judge."""
    length_given = False
    for name, _ in headers:
        if name == b":status":
            return None
        if name == b"content-length":
            length_given = True
    machine = stream.state_machine
    machine.state = _OPEN
    machine.client = False
    machine.headers_received = True
    event = RequestReceived(stream_id=stream.stream_id)
    events: list[Any] = [event]
    if end:
        machine.state = _HALF_CLOSED_REMOTE
        event.stream_ended = ended = StreamEnded(stream_id=stream.stream_id)
        events.append(ended)
    if length_given:
        stream._initialize_content_length(headers)  # raises on a bad value, as in receive_headers
    event.headers = list(headers)
    return events


def take_unary(
    conn: h2.connection.H2Connection, buffer: GuardedFrameBuffer, data: bytes
) -> tuple[int, Any, bytes] | None:
    """A whole unary request that is all of ``data``: ``(stream_id, headers, body)``, else None
    (nothing changed: hand ``data`` to :func:`take_frames` and h2).

    Whole: a HEADERS frame (END_HEADERS only) opening a new client stream, then one DATA frame
    with END_STREAM on it, ending the read; a header block :meth:`FastDecoder.decode_cached`
    reads, no ``:status``, a content-length (if any) equal to the body's, a body within the
    stream's and the connection's windows, fewer streams open than our limit. h2 gets no stream
    for it: the connection window is charged, the stream id recorded as the highest, and the id
    kept as the connection's ``unanswered`` one. :func:`.server_conn.send_unary` answers it as h2
    would answer an ended request and records it as closed; anything else must first give h2 its
    stream with :func:`open_taken`, as it stood after the read (HALF_CLOSED_REMOTE, both frames
    counted). At most one stream is taken at a time: the caller opens or answers it before its
    read ends, so that later frames on it find what h2 expects.
    """
    if not probe.fast or not _OWN_TRANSITIONS or not isinstance(conn, RefusingConnection):
        return None
    try:
        framing = _whole_request(conn, buffer, data)
        if framing is None:
            return None
        stream_id, block_end, length = framing
        window = conn._inbound_flow_control_window_manager
        decoder: FastDecoder = conn.decoder  # type: ignore[assignment]  # checked by _whole_request
        headers = None if length > window.current_window_size else decoder.decode_cached(data[9:block_end])
        if headers is None:
            return None  # h2 raises FlowControlError, or reads the block (HPACK state)
        for name, value in headers:
            if name == b":status" or (name == b"content-length" and not _same_length(value, length)):
                return None  # h2 judges (and refuses) these
        if len(conn.streams) >= conn.stream_limit and (
            conn.open_inbound_streams >= conn.local_settings.max_concurrent_streams
        ):
            return None  # the refusing path (RST_STREAM REFUSED_STREAM) is h2's
        window.window_consumed(length)
        buffer.budget -= HEADER_COST + 1
        buffer.empty_frames = 0
        conn.highest_inbound_stream_id = stream_id
        conn.unanswered = stream_id
        return stream_id, headers, data[block_end + 9 :]
    except Exception as exc:
        raise probe.KernelFault("take_unary") from exc


def _whole_request(
    conn: RefusingConnection, buffer: GuardedFrameBuffer, data: bytes
) -> tuple[int, int, int] | None:
    """``(stream_id, end of the header block, body length)`` when ``data`` is exactly HEADERS
    (END_HEADERS only) + DATA (END_STREAM only) on one new client stream, within every frame and
    window limit, on a connection with nothing pending; else None."""
    size = len(data)
    if (
        size < 18
        or data[3] != _HEADERS
        or data[4] != _END_HEADERS
        or conn.unanswered
        or conn.config is not SERVER_CONFIG
        or buffer._data
        or buffer._headers_buffer
        or buffer._preamble_len
        or buffer.budget < HEADER_COST + 1
        or conn.state_machine.state is not ConnectionState.SERVER_OPEN
        or not isinstance(conn.decoder, FastDecoder)
    ):
        return None
    block_end = 9 + int.from_bytes(data[:3], "big")
    body_start = block_end + 9
    length = size - body_start
    limit = conn.max_inbound_frame_size
    stream_id = int.from_bytes(data[5:9], "big")
    if (
        length < 0
        or int.from_bytes(data[block_end : block_end + 3], "big") != length
        or data[block_end + 3] != _DATA
        or data[block_end + 4] != _END_STREAM
        or data[block_end + 5 : body_start] != data[5:9]
        or block_end - 9 > min(limit, buffer.max_header_bytes)
        or length > limit
        or not stream_id & 1
        or stream_id <= conn.highest_inbound_stream_id
        or stream_id > _MAX_STREAM_ID
        or length > conn.local_settings._settings[_INITIAL_WINDOW][0]  # initial_window_size (checks.py)
    ):
        return None
    return stream_id, block_end, length


def _same_length(value: bytes, length: int) -> bool:
    return value.isdigit() and int(value) == length


def open_taken(conn: h2.connection.H2Connection, stream_id: int, headers: Any, body: bytes) -> None:
    """Give h2 the stream of a request :func:`take_unary` took, as h2's ``receive_data`` would have
    left it (HALF_CLOSED_REMOTE, the body counted in its window and content length)."""
    if not isinstance(conn, RefusingConnection) or conn.unanswered != stream_id:
        raise probe.KernelFault(f"open_taken: stream {stream_id} was not taken")
    stream = new_stream(conn, stream_id)
    conn.unanswered = 0
    if _open_request(stream, headers, False) is None or _take_data(stream, body, True) is None:
        raise probe.KernelFault(f"open_taken: stream {stream_id} could not be opened")
