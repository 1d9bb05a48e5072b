"""The client's fast path: response frames read, and requests written, without h2's generic code.

Each function here reads or writes h2 (4.x) internals, checked at import (:mod:`.checks`); while
:data:`.probe.fast` is False each takes nothing (the caller's h2 path does all the work). An
unexpected exception in this code is raised as :class:`.probe.KernelFault`: our bug, reported as
ours by the connection, which then moves the process to the public path.
"""

from __future__ import annotations

import struct
from typing import Any

import h2.config
import h2.connection
import h2.exceptions
import h2.stream
from h2.connection import ConnectionState
from h2.events import TrailersReceived
from h2.stream import H2StreamStateMachine, StreamInputs, StreamState
from h2.utilities import is_informational_response

from conveyor_sdk._h2kernel import probe
from conveyor_sdk._h2kernel.client import PLAIN_CLIENT_CONFIG
from conveyor_sdk._h2kernel.client_answer import RESPONSE_FLAGS, answer_headers, receive_data
from conveyor_sdk._h2kernel.hpackfast import FastDecoder
from conveyor_sdk._h2kernel.streams import new_stream

__all__ = ["DataFrameTaker", "send_request", "take_response_frames"]

_READABLE = (StreamState.OPEN, StreamState.HALF_CLOSED_LOCAL)
_CLIENT_OPEN = ConnectionState.CLIENT_OPEN  # a global: an Enum member read through its class is slower
_OPEN, _HALF_CLOSED_LOCAL = StreamState.OPEN, StreamState.HALF_CLOSED_LOCAL
_transitions: dict[Any, Any] = getattr(h2.stream, "_transitions", {})
# The rows of h2's stream transition table that send_request applies itself: a new stream sends
# its request headers (IDLE -> OPEN, request_sent), then DATA (OPEN -> OPEN, nothing else) and
# END_STREAM (OPEN -> HALF_CLOSED_LOCAL, nothing else). Checked here against h2's table; should
# it differ, h2's own process_input moves the stream.
_OWN_SEND_TRANSITIONS = (
    _transitions.get((StreamState.IDLE, StreamInputs.SEND_HEADERS))
    == (H2StreamStateMachine.request_sent, _OPEN)
    and _transitions.get((_OPEN, StreamInputs.SEND_DATA)) == (None, _OPEN)
    and _transitions.get((_OPEN, StreamInputs.SEND_END_STREAM)) == (None, _HALF_CLOSED_LOCAL)
)

_DATA = 0x0
_HEADERS = 0x1
_CONTINUATION = 0x9
_END_STREAM = 0x1
_END_HEADERS = 0x4
_HEADER = 9
_MAX_PROCESSED = 64  # processed response header blocks remembered per connection
_FRAME_HEAD = struct.Struct(">BHBBI")  # length (24 bits, as 8 + 16), type, flags, stream id


class DataFrameTaker:
    """Plain DATA frames of one stream at the start of a read, taken without h2's frame parser.

    The latency path of a worker: a Dispatch arrives as one DATA frame, and h2's generic
    parser (frame objects, their ``repr`` for its trace log, two state machines) costs more
    than the rest of the way to the handler. A frame is taken only when h2 would accept it
    with no other effect than consuming flow-control window: nothing of an earlier read is
    buffered in h2, the frame is complete, carries no flags (no END_STREAM, no padding),
    fits both receive windows and the frame-size limit, and the stream is open for reading.
    Both windows are charged here exactly as h2 would, so acknowledging the bytes later
    through h2 keeps WINDOW_UPDATEs identical. :meth:`take` returns the payloads and how many
    bytes of ``data`` they used; the caller feeds the rest to h2, which sees every other frame
    and every error case.

    It reads h2 (4.x) internals, looked up on the first :meth:`take` (after the response
    headers) and kept for the stream's life: should they be missing, or should the response
    announce a content-length, it takes nothing, ever.
    """

    __slots__ = ("_conn", "_refs", "_stream_id")

    def __init__(self, conn: h2.connection.H2Connection, stream_id: int) -> None:
        self._conn = conn
        self._stream_id = stream_id
        self._refs: tuple[Any, Any, Any, Any] | bool | None = None  # False: never take

    def _resolve(self) -> tuple[Any, Any, Any, Any] | bool:
        if not probe.fast:
            return False
        conn = self._conn
        stream = conn.streams.get(self._stream_id)
        refs = (
            conn.incoming_buffer,
            getattr(conn, "_inbound_flow_control_window_manager", None),
            stream,
            getattr(stream, "_inbound_window_manager", None),
        )
        buffer = refs[0]
        usable = (
            None not in refs
            and hasattr(buffer, "_data")
            and hasattr(buffer, "_headers_buffer")
            and getattr(stream, "_expected_content_length", 0) is None
        )
        return refs if usable else False

    def take(self, data: bytes) -> tuple[list[bytes], int]:
        try:
            refs = self._refs
            if refs is None:
                refs = self._refs = self._resolve()
            if refs is False:
                return [], 0
            buffer, conn_window, stream, stream_window = refs  # type: ignore[misc]
            conn = self._conn
            if (
                buffer._data
                or buffer._headers_buffer
                or conn.state_machine.state is not _CLIENT_OPEN
                or stream.state_machine.state not in _READABLE
            ):
                return [], 0
            stream_id = self._stream_id
            limit = conn.max_inbound_frame_size
            payloads: list[bytes] = []
            offset, size = 0, len(data)
            while size - offset >= _HEADER:
                high, low, kind, flags, sid = _FRAME_HEAD.unpack_from(data, offset)
                length = high << 16 | low
                end = offset + _HEADER + length
                if (
                    kind != _DATA
                    or flags != 0
                    or sid & 0x7FFFFFFF != stream_id
                    or end > size
                    or length > limit
                    or length > conn_window.current_window_size
                    or length > stream_window.current_window_size
                ):
                    break
                # h2's window_consumed, minus its below-zero check (the length fits both windows)
                conn_window.current_window_size -= length
                stream_window.current_window_size -= length
                payloads.append(data[offset + _HEADER : end])
                offset = end
            return payloads, offset
        except Exception as exc:
            raise probe.KernelFault("DataFrameTaker.take") from exc


def take_response_frames(conn: h2.connection.H2Connection, data: bytes) -> tuple[list[Any], int]:
    """Events of the ordinary response frames at the start of ``data``, and how many bytes they used.

    The async client's answer to a unary call is a HEADERS frame, a DATA frame and, for gRPC,
    trailers: h2's generic parser turns each into a frame object, formats its ``repr`` for a
    trace log, runs the connection's state machine and decodes HPACK field by field, which is
    most of a call's receive cost (and runs on a producer's CPU while the task it just enqueued
    is being dispatched). Taken here, each only on a stream this client opened that is open for
    reading, when nothing of an earlier read is buffered in h2:

    * HEADERS with END_HEADERS (END_STREAM allowed, no padding or priority) whose block
      :meth:`FastDecoder.decode_cached` reads without changing HPACK state;
    * DATA (END_STREAM allowed, no padding, not empty without flags).

    Each goes through h2's own stream objects (``receive_headers`` / ``receive_data``) and the
    connection window is charged as h2 does, so stream states, windows, header validation and
    events are h2's. A protocol error ends the connection as ``H2Connection.receive_data``
    would. The caller hands ``data[used:]`` to ``conn.receive_data``. It reads h2 (4.x)
    internals; should they change, it takes nothing.
    """
    if not probe.fast:
        return [], 0
    try:
        return _take_response_frames(conn, data)
    except h2.exceptions.ProtocolError:
        raise
    except Exception as exc:
        raise probe.KernelFault("take_response_frames") from exc


def _take_response_frames(conn: h2.connection.H2Connection, data: bytes) -> tuple[list[Any], int]:
    buffer = conn.incoming_buffer
    decoder = conn.decoder
    conn_window = getattr(conn, "_inbound_flow_control_window_manager", None)
    if (
        getattr(buffer, "_data", b"?")
        or getattr(buffer, "_headers_buffer", True)
        or conn.state_machine.state is not _CLIENT_OPEN
        or not isinstance(decoder, FastDecoder)
        or conn_window is None
    ):
        return [], 0
    events: list[Any] = []
    offset, size = 0, len(data)
    limit = conn.max_inbound_frame_size
    try:
        while size - offset >= _HEADER:
            length = int.from_bytes(data[offset : offset + 3], "big")
            end = offset + _HEADER + length
            if end > size or length > limit:
                break
            kind, flags = data[offset + 3], data[offset + 4]
            stream = conn.streams.get(int.from_bytes(data[offset + 5 : offset + 9], "big"))
            if stream is None or stream.state_machine.state not in _READABLE:
                break
            payload = data[offset + _HEADER : end]
            if kind == _DATA:
                if flags & ~_END_STREAM or not (payload or flags):
                    break  # padding, unknown flags, or an empty frame: h2's
                conn_window.window_consumed(length)
                frames, got = receive_data(stream, payload, bool(flags), length)
            elif kind == _HEADERS:
                if flags & ~(_END_STREAM | _END_HEADERS) or not flags & _END_HEADERS:
                    break  # padding, priority, CONTINUATION: h2's
                headers = decoder.decode_cached(payload)
                if headers is None:
                    break
                frames, got = _receive_headers(stream, headers, bool(flags & _END_STREAM), conn)
            else:
                break
            conn._prepare_for_sending(frames)
            events += got
            offset = end
    except h2.exceptions.ProtocolError as exc:
        conn._terminate_connection(exc.error_code)  # as h2's receive_data does
        raise
    return events, offset


def _receive_headers(
    stream: h2.stream.H2Stream, headers: list[Any], end_stream: bool, conn: h2.connection.H2Connection
) -> tuple[list[Any], list[Any]]:
    """h2's ``H2Stream.receive_headers`` for a response block, its header processing remembered.

    A unary client reads the same block (``:status 200``, the media type, ...) on every call, and
    h2 normalizes, validates and decodes it anew each time (docs/performance.md, "Producer, second
    pass", has the profile and the command). That processing is a function of the header list, the
    validation flags and the connection's settings only, so the result h2 computed for a block
    (the same list object: :meth:`.FastDecoder.decode_cached` hands out one per remembered block)
    under the same flags is reused. What h2 raises is never remembered: a bad block is rejected
    by h2 every time. State transitions, content length and trailers are h2's, run as
    ``receive_headers`` runs them (compared with h2's own on twin connections at import:
    ``checks._repeated_answer``).
    """
    memo = getattr(conn, "processed_headers", None)
    if memo is None or is_informational_response(headers):
        return stream.receive_headers(headers, end_stream, conn.config.header_encoding)
    event: Any
    events = answer_headers(stream, end_stream)
    if events is not None:  # the answer to a request sent whole: the stream moved as h2 moves it
        event = events[0]
        validation = RESPONSE_FLAGS
        stream._initialize_content_length(headers)
    else:
        machine = stream.state_machine
        events = machine.process_input(StreamInputs.RECV_HEADERS)
        event = events[0]
        if end_stream:
            ended = machine.process_input(StreamInputs.RECV_END_STREAM)
            event.stream_ended = ended[0]
            events += ended
        stream._initialize_content_length(headers)
        if isinstance(event, TrailersReceived) and not end_stream:
            raise h2.exceptions.ProtocolError("Trailers must have END_STREAM set")
        validation = stream._build_hdr_validation_flags(events)
    key = (id(headers), validation)
    known = memo.get(key)
    if known is None or known[0] is not headers:
        processed = stream._process_received_headers(headers, validation, conn.config.header_encoding)
        if len(memo) >= _MAX_PROCESSED:
            memo.clear()
        memo[key] = (headers, processed)
    else:
        processed = known[1]
    event.headers = list(processed)  # the event's own list, as h2 gives each event
    return [], events


def send_request(
    conn: h2.connection.H2Connection, headers: list[tuple[str, str]], body: bytes
) -> tuple[int, int] | None:
    """Open the next client stream and queue its HEADERS and ``body`` without h2's ``send_headers``.

    The latency path of a producer: h2's ``send_headers``/``send_data`` encode every field to
    bytes, build validation flags and frame objects, serialize them and log along the way, for
    frames whose bytes are fixed by the headers and the body. Here the stream is
    opened as h2's ``_begin_new_stream`` opens it and moved along h2's own transition table (the
    three rows checked at import, :data:`_OWN_SEND_TRANSITIONS`), the block
    comes from ``conn.encoder`` (hpack encodes ``str`` exactly as h2's ``utf8_encode_headers``
    would), and the frames are written into h2's output buffer as h2 would serialize them: HEADERS
    (CONTINUATION past the frame size) with END_STREAM when there is no body, then ``body`` as one
    DATA frame with END_STREAM when it fits both send windows and the frame size, both windows
    charged. Returns ``(stream id, body bytes sent)``; the caller sends the rest (through h2).

    Returns ``None`` having changed nothing wherever h2 would do more or fail: the connection is
    not open (h2 still IDLE before its first stream, or closed), stream ids are exhausted, the
    server's MAX_CONCURRENT_STREAMS is reached (counted by h2 near the limit: :func:`_at_stream_limit`),
    outbound header validation or normalisation is on, or there are no headers. It reads h2 (4.x)
    internals; should they change, it takes nothing.
    """
    if not probe.fast:
        return None
    try:
        config = conn.config
        if (
            conn.state_machine.state is not _CLIENT_OPEN
            or not headers
            or (config is not PLAIN_CLIENT_CONFIG and not _plain_client(config))
        ):
            return None
        highest = conn.highest_outbound_stream_id
        stream_id = highest + 2 if highest else 1
        if stream_id > conn.HIGHEST_ALLOWED_STREAM_ID or _at_stream_limit(conn):
            return None
        stream = new_stream(conn, stream_id)
        conn.highest_outbound_stream_id = stream_id
        machine = stream.state_machine
        if _OWN_SEND_TRANSITIONS:  # request_sent's whole work, as h2's process_input would do it
            machine.state = _OPEN
            machine.client = machine.headers_sent = True
        else:
            machine.process_input(StreamInputs.SEND_HEADERS)
        authority = method = None
        for name, value in headers:
            if name == ":authority" and authority is None:
                authority = value.encode("utf-8")
            elif name == ":method" and method is None:
                method = value.encode("utf-8")
        stream._authority = authority
        stream.request_method = method
        block = conn.encoder.encode(headers)
        out = conn._data_to_send
        _header_frames(out, stream_id, block, conn.max_outbound_frame_size, end_stream=not body)
        if not body:
            _end_stream(machine)
            return stream_id, 0
        size = len(body)
        if (
            size > conn.outbound_flow_control_window
            or size > stream.outbound_flow_control_window
            or size > conn.max_outbound_frame_size
        ):
            return stream_id, 0  # the caller splits it through h2's send_data
        if not _OWN_SEND_TRANSITIONS:  # OPEN --SEND_DATA--> OPEN does nothing else
            machine.process_input(StreamInputs.SEND_DATA)
        _end_stream(machine)
        out += size.to_bytes(3, "big") + bytes((_DATA, _END_STREAM)) + stream_id.to_bytes(4, "big")
        out += body
        stream.outbound_flow_control_window -= size
        conn.outbound_flow_control_window -= size
        return stream_id, size
    except Exception as exc:
        raise probe.KernelFault("send_request") from exc


def _at_stream_limit(conn: h2.connection.H2Connection) -> bool:
    """Whether one more stream would pass the server's MAX_CONCURRENT_STREAMS.

    Fewer streams held than the limit means fewer open, so h2's count (a walk over every stream
    that also retires the closed ones, tens of us on a cold process) runs only near the limit;
    the connection retires closed streams itself, off the send path (:func:`.streams.retire_closed`).
    """
    limit = conn.remote_settings.max_concurrent_streams
    return len(conn.streams) + 1 > limit and conn.open_outbound_streams + 1 > limit


def _plain_client(config: h2.config.H2Configuration) -> bool:
    return config.client_side and not (config.validate_outbound_headers or config.normalize_outbound_headers)


def _end_stream(machine: H2StreamStateMachine) -> None:
    if _OWN_SEND_TRANSITIONS:
        machine.state = _HALF_CLOSED_LOCAL
    else:
        machine.process_input(StreamInputs.SEND_END_STREAM)


def _header_frames(out: bytearray, stream_id: int, block: bytes, limit: int, *, end_stream: bool) -> None:
    """HEADERS (+ CONTINUATION) frames of ``block`` as h2 serializes them, appended to ``out``."""
    sid = stream_id.to_bytes(4, "big")
    for start in range(0, len(block), limit):
        chunk = block[start : start + limit]
        flags = _END_HEADERS if start + limit >= len(block) else 0
        if start == 0:
            kind = _HEADERS
            flags |= _END_STREAM if end_stream else 0
        else:
            kind = _CONTINUATION
        out += len(chunk).to_bytes(3, "big") + bytes((kind, flags)) + sid
        out += chunk
