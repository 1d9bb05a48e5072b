"""The DATA-frame fast path of SessionCore behaves exactly like h2's own parser."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.settings
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conveyor_sdk._protocol.framing import encode_frame
from conveyor_sdk._transport.core import SessionCore
from tests._h2paths import FAST_ONLY

pytestmark = FAST_ONLY

HEADERS = [(":method", "POST"), (":scheme", "http"), (":path", "/x/y"), (":authority", "h:1")]
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# One server action: ("data", size, pad) | ("ping",) | ("window",) | ("settings",) | ("read", n)
_ACTION = st.one_of(
    st.tuples(
        st.just("data"),
        st.one_of(st.integers(0, 300), st.integers(0, 40_000)),
        st.sampled_from([None, None, None, 0, 7]),
    ),
    st.tuples(st.just("ping")),
    st.tuples(st.just("window")),
    st.tuples(st.just("settings")),
    st.tuples(st.just("read"), st.integers(0, 5)),
)


def _pair(protocol: str) -> tuple[list[SessionCore], h2.connection.H2Connection]:
    cores = [SessionCore(protocol, recv_high_water=64 * 1024, fast_data=fast) for fast in (True, False)]
    for core in cores:
        core.start(HEADERS)
    srv = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    srv.initiate_connection()
    preface = cores[0].data_to_send()
    assert preface == cores[1].data_to_send()
    srv.receive_data(preface)
    ctype = "application/grpc" if protocol == "grpc" else "application/connect+proto"
    srv.send_headers(1, [(":status", "200"), ("content-type", ctype)])
    _feed(cores, srv, [])  # the response headers arrive first, as from a real server
    return cores, srv


def _feed(cores: list[SessionCore], srv: h2.connection.H2Connection, cuts: list[int]) -> None:
    data = srv.data_to_send()
    points = sorted({c % (len(data) + 1) for c in cuts})
    last = 0
    for p in [*points, len(data)]:
        if p > last:
            outs = []
            for core in cores:
                core.receive_data(data[last:p])
                wants = core.wants_write
                outs.append(core.data_to_send())
                assert wants == (bool(outs[-1]) or core.connection_closed)  # the I/O layer skips no write
                assert not core.wants_write or core.connection_closed
            assert outs[0] == outs[1]  # identical WINDOW_UPDATEs, PING and SETTINGS acks
            srv.receive_data(outs[0])
            last = p


def _state(core: SessionCore) -> tuple[object, ...]:
    conn = core._conn
    return (
        core.unread,
        core.finished,
        repr(core.error),
        conn.inbound_flow_control_window,
        conn._get_stream_by_id(1).inbound_flow_control_window if 1 in conn.streams else None,
    )


def _serve(srv: h2.connection.H2Connection, action: tuple, pending: bytes) -> bytes:
    """Queue one server action; returns the message bytes still waiting for window."""
    kind = action[0]
    if kind == "data":
        size, pad = action[1], action[2]
        pending += encode_frame(bytes([size % 251]) * size)
        room = max(0, min(srv.local_flow_control_window(1), srv.max_outbound_frame_size - (pad or 0) - 1))
        if pending[:room]:
            srv.send_data(1, pending[:room], pad_length=pad)
        return pending[room:]
    if kind == "ping":
        srv.ping(b"12345678")
    elif kind == "window":
        srv.increment_flow_control_window(1000)
    else:
        srv.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 10})
    return pending


def _take(core: SessionCore, n: int) -> list[bytes]:
    out = [core.take_message() for _ in range(n)]
    return [m for m in out if m is not None]


@FUZZ
@given(
    st.sampled_from(["grpc", "connect"]),
    st.lists(_ACTION, max_size=25),
    st.one_of(st.just([]), st.lists(st.integers(min_value=0), max_size=12)),
    st.booleans(),
)
def test_fast_path_matches_h2(protocol: str, actions: list[tuple], cuts: list[int], end: bool) -> None:
    """Any mix of DATA (plain, padded, large), PING, WINDOW_UPDATE and SETTINGS, cut anywhere, with
    reads in between, gives the same messages, the same bytes back and the same windows both ways."""
    cores, srv = _pair(protocol)
    pending = b""
    got: list[list[bytes]] = [[], []]
    for action in actions:
        if action[0] == "read":
            for i, core in enumerate(cores):
                got[i] += _take(core, action[1])
        else:
            pending = _serve(srv, action, pending)
        _feed(cores, srv, cuts)
    if end:
        srv.send_headers(1, [("grpc-status", "0")], end_stream=True)
        _feed(cores, srv, cuts)
    for i, core in enumerate(cores):
        got[i] += _take(core, core.unread)
    assert got[0] == got[1]
    assert _state(cores[0]) == _state(cores[1])
    assert cores[1].fast_frames == 0
    if any(a[0] == "data" and a[2] is None for a in actions):
        event("fast path used" if cores[0].fast_frames else "fast path not used")


def test_plain_data_frames_take_the_fast_path() -> None:
    """A Dispatch-sized DATA frame on the open stream is read without h2's parser."""
    cores, srv = _pair("grpc")
    for i in range(3):
        srv.send_data(1, encode_frame(b"m%d" % i))
    _feed(cores, srv, [])
    assert [cores[0].take_message() for _ in range(3)] == [b"m0", b"m1", b"m2"]
    assert cores[0].fast_frames == 3


def test_end_stream_data_goes_through_h2() -> None:
    """DATA with END_STREAM is h2's business (it closes the stream): the outcome is the same."""
    cores, srv = _pair("connect")
    srv.send_data(1, encode_frame(b"last") + encode_frame(b"{}", flags=2), end_stream=True)
    _feed(cores, srv, [])
    fast = cores[0]
    assert fast.take_message() == b"last" and fast.finished and fast.error is None
    assert fast.remote_ended and fast.fast_frames == 0
