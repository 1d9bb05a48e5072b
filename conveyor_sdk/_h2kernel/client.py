"""The client's h2 connection and header codecs (sans-I/O), on both paths of the kernel."""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
from h2.connection import ConnectionState
from hpack import Encoder
from hpack.table import HeaderTable

from conveyor_sdk._h2kernel import probe
from conveyor_sdk._h2kernel.hpackfast import FastDecoder
from conveyor_sdk._h2kernel.walker import FrameWalker

__all__ = [
    "PLAIN_CLIENT_CONFIG",
    "CachingEncoder",
    "Connection",
    "PublicConnection",
    "client_connection",
    "str_headers",
]

_GOAWAY = 0x7
# The client configuration of H2Conn: send_request knows by its identity that outbound headers are
# neither validated nor normalised (reading those three options costs three descriptor calls).
PLAIN_CLIENT_CONFIG = h2.config.H2Configuration(
    client_side=True,
    header_encoding="utf-8",
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
)


class Connection(h2.connection.H2Connection):
    """h2's client connection, except that a graceful GOAWAY keeps already-open streams alive.

    h2 (4.x) closes its connection state machine on *any* GOAWAY and drops queued output,
    which would reject the rest of a stream the server announced it will still finish.
    RFC 9113 §6.8 lets streams up to last-stream-id complete, so for a NO_ERROR GOAWAY that
    covers our stream we restore the open state and the queued bytes. We never open another
    stream on the connection, which is all such a GOAWAY forbids. (Fast path: h2's private
    GOAWAY hook; :class:`PublicConnection` does the same through public methods.)
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Response header blocks h2 has already normalized and validated (see client_fast's
        # _receive_headers): a unary client reads the same few blocks on every call.
        self.processed_headers: dict[tuple[int, Any], tuple[list[Any], list[Any]]] = {}

    def _receive_goaway_frame(self, frame: Any) -> Any:
        keep = _keeps(self, frame.error_code, frame.last_stream_id)
        saved = bytes(self._data_to_send)
        result = super()._receive_goaway_frame(frame)
        if keep:
            self.state_machine.state = ConnectionState.CLIENT_OPEN
            self._data_to_send += saved
        return result


class PublicConnection(h2.connection.H2Connection):
    """:class:`Connection`'s GOAWAY rule through h2's public API only.

    Each read is split after every GOAWAY frame (found by :class:`FrameWalker`), so the state is
    restored before h2 sees the frames that follow it; h2's ``clear_outbound_data_buffer`` is held
    back while a GOAWAY is read and applied afterwards unless the GOAWAY keeps our streams.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._walker = FrameWalker()
        self._holding = False
        self._clear_asked = False

    def receive_data(self, data: Any) -> list[h2.events.Event]:
        ends = [end for end, kind, *_ in self._walker.feed(data) if kind == _GOAWAY]
        if not ends:
            return super().receive_data(data)
        events: list[h2.events.Event] = []
        start = 0
        for end in ends:
            events += self._through_goaway(data[start:end])
            start = end
        if start < len(data):
            events += super().receive_data(data[start:])
        return events

    def _through_goaway(self, part: Any) -> list[h2.events.Event]:
        self._holding, self._clear_asked = True, False
        try:
            events = super().receive_data(part)
        finally:
            self._holding = False
        for event in events:
            if isinstance(event, h2.events.ConnectionTerminated) and _keeps(
                self, int(event.error_code or 0), event.last_stream_id or 0
            ):
                self.state_machine.state = ConnectionState.CLIENT_OPEN
                self._clear_asked = False
        if self._clear_asked:
            super().clear_outbound_data_buffer()
        return events

    def clear_outbound_data_buffer(self) -> None:
        if self._holding:
            self._clear_asked = True
            return
        super().clear_outbound_data_buffer()


def _keeps(conn: h2.connection.H2Connection, error_code: int, last_stream_id: int) -> bool:
    return error_code == 0 and last_stream_id >= conn.highest_outbound_stream_id > 0


def client_connection(
    config: h2.config.H2Configuration, *, fast_codecs: bool = False
) -> h2.connection.H2Connection:
    """A client connection for the path the kernel is on; ``fast_codecs``: the caching HPACK
    encoder and fast decoder (a producer's many calls with the same headers)."""
    if not probe.fast:
        return PublicConnection(config=config)
    conn = Connection(config=config)
    if fast_codecs:
        conn.encoder = CachingEncoder()
        conn.decoder = FastDecoder()  # a fresh table: no state yet
    return conn


class _CountingTable(HeaderTable):
    """hpack's dynamic table, counting its changes (an insertion or a size change)."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 0

    def add(self, name: bytes, value: bytes) -> Any:
        self.version += 1
        return super().add(name, value)

    @HeaderTable.maxsize.setter  # type: ignore[attr-defined,untyped-decorator]
    def maxsize(self, value: int) -> None:
        self.version += 1
        HeaderTable.maxsize.fset(self, value)  # type: ignore[attr-defined]


class CachingEncoder(Encoder):
    """hpack's encoder that reuses the block of a header list it encoded before.

    A unary client sends the same request headers call after call; once they are in the
    dynamic table, each encodes to the same indexed block, yet hpack searches the tables
    field by field every time (most of h2's cost of sending HEADERS). A block is reused only
    when encoding it changed nothing in the dynamic table and the table has not changed
    since, i.e. exactly when a fresh encode would produce the same bytes. The key includes
    each field's type, so a never-indexed field never matches a plain one.
    """

    _LIMIT = 64

    def __init__(self) -> None:
        super().__init__()
        self.header_table = _CountingTable()
        self._blocks: dict[tuple[Any, ...], tuple[int, bytes]] = {}
        self.reused = 0

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        fields = tuple(headers)
        key = (fields, tuple(map(type, fields)))
        table = self.header_table
        version = table.version  # type: ignore[attr-defined]
        resized = table.resized  # the block then starts with a size update: never reused
        hit = self._blocks.get(key)
        if hit is not None and hit[0] == version and not resized:
            self.reused += 1
            return hit[1]
        block = super().encode(fields, huffman)
        if table.version == version and not resized:  # type: ignore[attr-defined]
            if len(self._blocks) >= self._LIMIT:
                self._blocks.clear()
            self._blocks[key] = (version, block)
        return block


def str_headers(raw: object) -> dict[str, str]:
    """Header list as a str dict (h2 yields str with ``header_encoding`` set; bytes are decoded)."""
    out: dict[str, str] = {}
    for name, value in raw or ():  # type: ignore[attr-defined]  # h2 types headers loosely
        key = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
        out[key] = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return out
