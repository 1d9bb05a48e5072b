"""h2 adaptations for the client session (sans-I/O)."""

from __future__ import annotations

from typing import Any

import h2.connection
from h2.connection import ConnectionState

__all__ = ["Connection", "str_headers"]


class Connection(h2.connection.H2Connection):
    """h2's client connection, except that a graceful GOAWAY keeps already-open streams alive.

    h2 (4.x) closes its connection state machine on *any* GOAWAY and drops queued output,
    which would reject the rest of a stream the server announced it will still finish.
    RFC 9113 §6.8 lets streams up to last-stream-id complete, so for a NO_ERROR GOAWAY that
    covers our stream we restore the open state and the queued bytes. We never open another
    stream on the connection, which is all such a GOAWAY forbids.
    """

    def _receive_goaway_frame(self, frame: Any) -> Any:
        keep = frame.error_code == 0 and frame.last_stream_id >= self.highest_outbound_stream_id > 0
        saved = bytes(self._data_to_send)
        result = super()._receive_goaway_frame(frame)
        if keep:
            self.state_machine.state = ConnectionState.CLIENT_OPEN
            self._data_to_send += saved
        return result


def str_headers(raw: object) -> dict[str, str]:
    """Header list as a str dict (h2 yields str with ``header_encoding`` set; bytes are decoded)."""
    out: dict[str, str] = {}
    for name, value in raw or ():  # type: ignore[attr-defined]  # h2 types headers loosely
        key = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
        out[key] = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return out
