"""Stream bookkeeping shared by the client and the server side of the kernel."""

from __future__ import annotations

import h2.connection
from h2.stream import H2Stream
from h2.windows import WindowManager

from conveyor_sdk._h2kernel import probe

__all__ = ["new_stream", "pending_output", "retire_closed", "retired_streams", "window_reopens"]


def retire_closed(conn: h2.connection.H2Connection) -> None:
    """Move h2's closed streams out of ``conn.streams``, as h2 does whenever it counts open ones.

    The fast send and receive paths skip h2's count (a walk over every stream); the connection
    calls this off the latency path, once a read's output is written.
    """
    if probe.fast:
        conn._open_streams(0)  # the walk behind open_(in|out)bound_streams, for its retiring
    else:
        conn.open_outbound_streams  # noqa: B018  # the public property walks (and retires) the same way


def retired_streams(conn: h2.connection.H2Connection) -> int:
    """How many closed streams h2 has retired from ``conn.streams`` (it remembers each one's end);
    -1 where h2 keeps no such record. For tests of the retiring."""
    return len(getattr(conn, "_closed_streams", ())) if hasattr(conn, "_closed_streams") else -1


def pending_output(conn: h2.connection.H2Connection) -> int:
    """Bytes h2 has queued to send; -1 when that is unknown (the public path cannot look without
    taking them), which callers treat as "maybe some"."""
    if probe.fast:
        return len(conn._data_to_send)
    return -1


def new_stream(conn: h2.connection.H2Connection, stream_id: int) -> H2Stream:
    """The stream h2's ``_begin_new_stream`` would create and register for ``stream_id``, without
    its checks and debug logging: the caller checked the id (odd, above every id of its side so
    far) and records it as its side's highest. Fast path only (client requests, server requests)."""
    stream = H2Stream(
        stream_id,
        config=conn.config,
        inbound_window_size=conn.local_settings.initial_window_size,
        outbound_window_size=conn.remote_settings.initial_window_size,
    )
    stream.max_outbound_frame_size = conn.max_outbound_frame_size
    conn.streams[stream_id] = stream
    return stream


def window_reopens(window: WindowManager, size: int) -> bool:
    """Whether ``window.process_bytes(size)`` would return an increment (h2's ``_maybe_update_window``):
    a WINDOW_UPDATE is due. Fast path only (it reads the manager's private count)."""
    processed = window._bytes_processed + size
    return (
        window.current_window_size == 0 and processed > min(1024, window.max_window_size // 4)
    ) or processed >= window.max_window_size // 2
