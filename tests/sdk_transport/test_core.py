"""SessionCore, sans-I/O: frames from a server-side h2 connection in, state and bytes out."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
from h2.errors import ErrorCodes

from conveyor_sdk._protocol.framing import FLAG_END_STREAM, encode_frame
from conveyor_sdk._transport.core import SessionCore
from conveyor_sdk.errors import Internal, Unavailable

HEADERS = [(":method", "POST"), (":scheme", "http"), (":path", "/p"), (":authority", "h:1")]
GRPC_200 = [(":status", "200"), ("content-type", "application/grpc")]


class Server:
    """The server half, driven by hand; ``pump`` moves bytes both ways."""

    def __init__(self, core: SessionCore) -> None:
        self.core = core
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.h2.initiate_connection()
        self.events: list[h2.events.Event] = []
        self.pump()

    def pump(self) -> None:
        self.events += self.h2.receive_data(self.core.data_to_send())
        self.core.receive_data(self.h2.data_to_send())
        self.events += self.h2.receive_data(self.core.data_to_send())

    def window_updates(self) -> int:
        return sum(
            e.delta or 0 for e in self.events if isinstance(e, h2.events.WindowUpdated) and e.stream_id == 1
        )


def _open(protocol: str = "grpc", **kw: int) -> tuple[SessionCore, Server]:
    core = SessionCore(protocol, **kw)
    core.start(HEADERS)
    return core, Server(core)


def test_goaway_in_same_read_as_rest_of_stream() -> None:
    """A graceful GOAWAY followed, in one read, by DATA and trailers still delivers both."""
    core, srv = _open()
    srv.h2.send_headers(1, GRPC_200)
    srv.h2.close_connection(ErrorCodes.NO_ERROR, last_stream_id=1)
    srv.h2.state_machine.state = h2.connection.ConnectionState.SERVER_OPEN  # let the server keep writing
    srv.h2.send_data(1, encode_frame(b"m1"))
    srv.h2.send_headers(1, [("grpc-status", "0")], end_stream=True)
    core.receive_data(srv.h2.data_to_send())
    assert core.goaway_received
    assert core.take_message() == b"m1"
    assert core.finished and core.error is None


def test_goaway_error_code_fails_connection() -> None:
    """A GOAWAY with an error code ends the stream with Unavailable and closes the connection."""
    core, srv = _open()
    srv.h2.close_connection(ErrorCodes.ENHANCE_YOUR_CALM, additional_data=b"slow down")
    core.receive_data(srv.h2.data_to_send())
    assert isinstance(core.error, Unavailable) and "ENHANCE_YOUR_CALM" in core.error.message
    assert core.connection_closed and core.send_blocker() is core.error


def test_unread_messages_withhold_window() -> None:
    """Past recv_high_water unread bytes no WINDOW_UPDATE is sent; reading releases it."""
    core, srv = _open(recv_high_water=1000)
    srv.h2.send_headers(1, GRPC_200)
    body = encode_frame(b"x" * 99_995) * 8  # 800 kB: over half the 1 MiB stream window
    for i in range(0, len(body), 16384):
        srv.h2.send_data(1, body[i : i + 16384])
    srv.pump()
    assert core.unread == 8
    assert srv.window_updates() == 0  # nothing given back while the messages sit unread
    while core.take_message() is not None:
        pass
    srv.pump()
    assert srv.window_updates() >= 700_000


def test_partial_message_bytes_are_acknowledged() -> None:
    """With nothing unread, a message larger than the stream window completes (its bytes are acknowledged)."""
    core, srv = _open(recv_high_water=0)
    srv.h2.send_headers(1, GRPC_200)
    big = encode_frame(b"y" * (3 << 20))  # larger than the 1 MiB stream window
    sent = 0
    while sent < len(big):
        srv.pump()
        window = min(srv.h2.local_flow_control_window(1), srv.h2.max_outbound_frame_size)
        assert window > 0, f"stalled after {sent} bytes"
        srv.h2.send_data(1, big[sent : sent + window])
        sent += window
        core.receive_data(srv.h2.data_to_send())
    assert core.take_message() == big[5:]


def test_connect_end_stream_with_error() -> None:
    """A Connect end-of-stream message carrying an error becomes that error after queued messages."""
    core, srv = _open("connect")
    srv.h2.send_headers(1, [(":status", "200"), ("content-type", "application/connect+proto")])
    end = b'{"error":{"code":"not_found","message":"gone"}}'
    srv.h2.send_data(1, encode_frame(b"m") + encode_frame(end, flags=FLAG_END_STREAM), end_stream=True)
    core.receive_data(srv.h2.data_to_send())
    assert core.take_message() == b"m"
    assert core.error is not None and core.error.code.connect_name == "not_found"


def test_unknown_flags_fail_the_stream() -> None:
    """A gRPC message with flags other than 0 is an Internal error and the stream is reset."""
    core, srv = _open()
    srv.h2.send_headers(1, GRPC_200)
    srv.h2.send_data(1, encode_frame(b"m", flags=0x04))
    core.receive_data(srv.h2.data_to_send())
    assert isinstance(core.error, Internal)
    srv.pump()
    assert any(isinstance(e, h2.events.StreamReset) for e in srv.events)


def test_send_respects_stream_window() -> None:
    """Queued bytes beyond the peer's window stay queued until a WINDOW_UPDATE arrives."""
    core, srv = _open()
    srv.pump()
    end = core.queue_message(b"z" * 100_000)
    assert core.flushed < end  # default 65,535-byte window
    srv.pump()
    received = sum(e.flow_controlled_length or 0 for e in srv.events if isinstance(e, h2.events.DataReceived))
    srv.h2.acknowledge_received_data(received, 1)
    srv.pump()
    core.flush()
    srv.pump()
    assert core.flushed == end
