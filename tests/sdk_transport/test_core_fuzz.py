"""The sans-I/O SessionCore never lets a foreign exception out, whatever bytes the server sends."""

from __future__ import annotations

import h2.config
import h2.connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor_sdk._protocol.framing import encode_frame
from conveyor_sdk._transport.core import SessionCore
from conveyor_sdk.errors import ConveyorError

HEADERS = [(":method", "POST"), (":scheme", "http"), (":path", "/x/y"), (":authority", "h:1")]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _drain(core: SessionCore) -> list[bytes]:
    out: list[bytes] = []
    while (msg := core.take_message()) is not None:
        out.append(msg)
    core.data_to_send()
    return out


def _server(core: SessionCore) -> h2.connection.H2Connection:
    srv = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    srv.initiate_connection()
    srv.receive_data(core.data_to_send())
    return srv


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in [*points, len(data)]:
        pieces.append(data[last:p])
        last = p
    return [p for p in pieces if p]


@FUZZ
@given(st.sampled_from(["grpc", "connect"]), st.lists(st.binary(max_size=300), max_size=6))
def test_random_bytes_never_raise(protocol: str, blobs: list[bytes]) -> None:
    """Arbitrary bytes from the socket end in a ConveyorError state at worst, never an exception."""
    core = SessionCore(protocol)
    core.start(HEADERS)
    core.data_to_send()
    for blob in blobs:
        core.receive_data(blob)
        _drain(core)
    assert core.error is None or isinstance(core.error, ConveyorError)
    if core.send_blocker() is None:
        core.queue_message(b"x")
    core.close_send()
    core.cancel()
    core.connection_lost(None)
    assert core.finished and isinstance(core.error, ConveyorError | None)


@FUZZ
@given(
    st.sampled_from(["grpc", "connect"]),
    st.binary(max_size=2000),
    st.lists(st.integers(min_value=0), max_size=8),
    st.one_of(st.none(), st.text(max_size=8)),
    st.one_of(st.none(), st.text(max_size=20)),
)
def test_garbage_body_in_valid_http2(
    protocol: str, body: bytes, cuts: list[int], status: str | None, message: str | None
) -> None:
    """Valid HTTP/2 carrying a garbage body and odd trailers yields messages or one ConveyorError."""
    core = SessionCore(protocol)
    core.start(HEADERS)
    srv = _server(core)
    ctype = "application/grpc" if protocol == "grpc" else "application/connect+proto"
    srv.send_headers(1, [(":status", "200"), ("content-type", ctype)])
    srv.send_data(1, body[: srv.max_outbound_frame_size])
    trailers = [(k, v) for k, v in (("grpc-status", status), ("grpc-message", message)) if v is not None]
    srv.send_headers(1, trailers or [("x-end", "1")], end_stream=True)
    for piece in _chunks(srv.data_to_send(), cuts):
        core.receive_data(piece)
    _drain(core)
    assert core.finished
    assert core.error is None or isinstance(core.error, ConveyorError)


@FUZZ
@given(
    st.lists(st.binary(max_size=3000), min_size=1, max_size=5),
    st.lists(st.integers(min_value=0), max_size=10),
)
def test_chunking_does_not_change_messages(payloads: list[bytes], cuts: list[int]) -> None:
    """However the socket splits the bytes, the same messages come out in order, then a clean end."""
    core = SessionCore("grpc")
    core.start(HEADERS)
    srv = _server(core)
    srv.send_headers(1, [(":status", "200"), ("content-type", "application/grpc")])
    body = b"".join(encode_frame(p) for p in payloads)
    for i in range(0, len(body), 16384):
        srv.send_data(1, body[i : i + 16384])
    srv.send_headers(1, [("grpc-status", "0")], end_stream=True)
    got: list[bytes] = []
    for piece in _chunks(srv.data_to_send(), cuts):
        core.receive_data(piece)
        got += _drain(core)
    assert got == payloads
    assert core.finished and core.error is None
