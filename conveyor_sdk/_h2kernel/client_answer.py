"""The client's fast path, answers: a response's stream moved, and its bytes acknowledged, without h2's calls.

Each function reads or writes h2 (4.x) internals, checked at import (:mod:`.checks`), and leaves
to h2 every case it does not take; :func:`.client_fast.take_response_frames` calls the first two.
"""

from __future__ import annotations

from typing import Any

import h2.connection
import h2.exceptions
import h2.stream
from h2.events import DataReceived, ResponseReceived, StreamEnded
from h2.stream import H2StreamStateMachine, StreamClosedBy, StreamInputs, StreamState
from h2.utilities import HeaderValidationFlags

from conveyor_sdk._h2kernel import probe
from conveyor_sdk._h2kernel.streams import window_reopens

__all__ = ["RESPONSE_FLAGS", "acknowledge", "answer_headers", "receive_data"]

_HALF_CLOSED_LOCAL = StreamState.HALF_CLOSED_LOCAL
_transitions: dict[Any, Any] = getattr(h2.stream, "_transitions", {})
# The rows h2's stream machine runs when a request that has been sent whole (HALF_CLOSED_LOCAL) gets its
# answer: the response headers (response_received), DATA (data_received) and END_STREAM (stream_ended,
# to CLOSED). answer_headers and receive_data apply them themselves when they are as checked here.
_CLOSED = StreamState.CLOSED
_OWN_RECV_TRANSITIONS = (
    _transitions.get((_HALF_CLOSED_LOCAL, StreamInputs.RECV_HEADERS))
    == (H2StreamStateMachine.response_received, _HALF_CLOSED_LOCAL)
    and _transitions.get((_HALF_CLOSED_LOCAL, StreamInputs.RECV_DATA))
    == (H2StreamStateMachine.data_received, _HALF_CLOSED_LOCAL)
    and _transitions.get((_HALF_CLOSED_LOCAL, StreamInputs.RECV_END_STREAM))
    == (H2StreamStateMachine.stream_ended, _CLOSED)
)
# What h2's _build_hdr_validation_flags makes of a response header block on a client's stream.
RESPONSE_FLAGS = HeaderValidationFlags(
    is_client=True, is_trailer=False, is_response_header=True, is_push_promise=False
)


def _ended_by_peer(stream: h2.stream.H2Stream, event: Any, events: list[Any]) -> None:
    """The peer's END_STREAM on a half-closed (local) stream, as h2 records it: closed, and a
    StreamEnded after the event that carried it."""
    machine = stream.state_machine
    machine.state = _CLOSED
    machine.stream_closed_by = StreamClosedBy.RECV_END_STREAM
    event.stream_ended = StreamEnded(stream_id=stream.stream_id)
    events.append(event.stream_ended)


def answer_headers(stream: h2.stream.H2Stream, end_stream: bool) -> list[Any] | None:
    """The events of a response header block on a stream whose request was sent whole, the stream
    moved as h2's ``response_received`` (and ``stream_ended``) move it; None, with nothing changed,
    for any other stream or block (informational responses are the caller's: it checks first)."""
    machine = stream.state_machine
    if not (
        _OWN_RECV_TRANSITIONS
        and machine.state is _HALF_CLOSED_LOCAL
        and machine.client is True
        and not machine.headers_received
    ):
        return None
    machine.headers_received = True
    event = ResponseReceived(stream_id=stream.stream_id)
    events: list[Any] = [event]
    if end_stream:
        _ended_by_peer(stream, event, events)
    return events


def receive_data(
    stream: h2.stream.H2Stream, data: bytes, end_stream: bool, length: int
) -> tuple[list[Any], list[Any]]:
    """h2's ``H2Stream.receive_data``; on a stream whose request was sent whole and whose response
    headers have arrived, its transitions applied here (:data:`_OWN_RECV_TRANSITIONS`) when the
    chunk fits the stream's window and its content-length. Everything h2 would refuse is h2's."""
    machine = stream.state_machine
    if not (_OWN_RECV_TRANSITIONS and machine.state is _HALF_CLOSED_LOCAL and machine.headers_received):
        return stream.receive_data(data, end_stream, length)
    window = stream._inbound_window_manager
    expected = stream._expected_content_length
    actual = stream._actual_content_length + len(data)
    if length > window.current_window_size or (
        expected is not None and (expected < actual or (end_stream and expected != actual))
    ):
        return stream.receive_data(data, end_stream, length)  # h2 raises its error
    window.current_window_size -= length  # window_consumed, its below-zero check done above
    stream._actual_content_length = actual
    event = DataReceived(stream_id=stream.stream_id)
    events: list[Any] = [event]
    if end_stream:
        _ended_by_peer(stream, event, events)
    event.data = data
    event.flow_controlled_length = length
    return [], events


def acknowledge(conn: h2.connection.H2Connection, stream_id: int, size: int) -> bool:
    """``conn.acknowledge_received_data(size, stream_id)`` for response bytes the client has read.

    h2 hands space back only once about half a window is consumed, so for most answers it only
    counts the bytes: then they are counted here, in the connection's window and, while the stream
    is open, the stream's, and h2's call (its logging, the stream lookup, and for a stream already
    retired an exception raised and caught) is skipped. Anything that would queue a WINDOW_UPDATE
    or raise, and an id this client never opened, is h2's. Returns whether a WINDOW_UPDATE may now
    wait to be sent (always True on the public path, which cannot look).
    """
    if not probe.fast:
        conn.acknowledge_received_data(size, stream_id)
        return True
    try:
        if _counted(conn, stream_id, size):
            return False
    except Exception as exc:
        raise probe.KernelFault("acknowledge") from exc
    queued = len(conn._data_to_send)
    conn.acknowledge_received_data(size, stream_id)  # and h2's own errors, as they are
    return len(conn._data_to_send) != queued


def _counted(conn: h2.connection.H2Connection, stream_id: int, size: int) -> bool:
    """Count ``size`` acknowledged bytes as h2 would, where that is all h2 would do; else False."""
    connection = conn._inbound_flow_control_window_manager
    if size <= 0 or window_reopens(connection, size):
        return False
    stream = conn.streams.get(stream_id)
    if stream is None:
        if stream_id % 2 == 0 or not 0 < stream_id <= conn.highest_outbound_stream_id:
            return False  # not one of ours: h2 raises
        connection._bytes_processed += size  # retired: h2 counts the connection's window only
        return True
    own = stream._inbound_window_manager if stream.open else None
    if own is not None and window_reopens(own, size):
        return False
    connection._bytes_processed += size
    if own is not None:
        own._bytes_processed += size
    return True
