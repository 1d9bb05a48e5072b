"""The client's response fast path (take_response_frames, client_answer) against h2, and in real calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conveyor_sdk._h2kernel.client import PLAIN_CLIENT_CONFIG, Connection
from conveyor_sdk._h2kernel.client_answer import acknowledge
from conveyor_sdk._h2kernel.client_fast import take_response_frames
from conveyor_sdk._h2kernel.hpackfast import FastDecoder
from conveyor_sdk._h2kernel.streams import retire_closed
from conveyor_sdk.testing.memory import MemoryServer
from tests._h2paths import FAST_ONLY

pytestmark = FAST_ONLY

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REQUEST = [(":method", "POST"), (":scheme", "http"), (":path", "/a/b"), (":authority", "h:1")]
STREAMS = (1, 3, 5)

# One server action on a stream index: headers (variant), data (size, end, pad), trailers, reset;
# or a connection frame: ping, settings, window.
_ACTION = st.one_of(
    st.tuples(st.just("headers"), st.sampled_from(range(3)), st.integers(0, 3), st.booleans()),
    st.tuples(
        st.just("data"),
        st.sampled_from(range(3)),
        st.one_of(st.integers(0, 200), st.integers(0, 20_000)),
        st.sampled_from([False, False, False, True]),
        st.sampled_from([None, None, 3]),
    ),
    st.tuples(st.just("trailers"), st.sampled_from(range(3)), st.integers(0, 2)),
    st.tuples(st.just("reset"), st.sampled_from(range(3))),
    st.tuples(st.just("ping")),
    st.tuples(st.just("settings")),
    st.tuples(st.just("window")),
)


def _client(kernel: bool = False) -> h2.connection.H2Connection:
    """A client connection; ``kernel``: the kernel's own (it remembers processed header blocks)."""
    config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    conn = Connection(config=config) if kernel else h2.connection.H2Connection(config)
    conn.decoder = FastDecoder()
    conn.initiate_connection()
    for sid in STREAMS:
        conn.send_headers(sid, REQUEST, end_stream=True)
    return conn


def _headers(variant: int, extra: int) -> list[tuple[str, str]]:
    base = [(":status", "200"), ("content-type", "application/proto")]
    if variant == 1:
        base.append(("content-length", str(10 + extra)))
    if variant == 2:
        base.append(("x-request", "r" * extra))
    return base


def _serve(srv: h2.connection.H2Connection, action: tuple[Any, ...]) -> None:
    kind = action[0]
    try:
        if kind == "headers":
            srv.send_headers(STREAMS[action[1]], _headers(action[2], action[3]), end_stream=False)
        elif kind == "data":
            sid = STREAMS[action[1]]
            size = min(action[2], srv.local_flow_control_window(sid), srv.max_outbound_frame_size)
            srv.send_data(sid, b"d" * size, end_stream=action[3], pad_length=action[4])
        elif kind == "trailers":
            srv.send_headers(STREAMS[action[1]], [("grpc-status", str(action[2]))], end_stream=True)
        elif kind == "reset":
            srv.reset_stream(STREAMS[action[1]])
        elif kind == "ping":
            srv.ping(b"12345678")
        elif kind == "settings":
            srv.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 50})
        else:
            srv.increment_flow_control_window(1000)
    except (h2.exceptions.ProtocolError, h2.exceptions.FlowControlError, ValueError, KeyError):
        pass  # not a frame the server may send in that state: nothing is sent


def _event(event: h2.events.Event) -> tuple[Any, ...]:
    return (type(event).__name__, *sorted((k, repr(v)) for k, v in vars(event).items()))


def _feed(conn: h2.connection.H2Connection, data: bytes, fast: bool) -> list[tuple[Any, ...]] | str:
    try:
        events, used = take_response_frames(conn, data) if fast else ([], 0)
        if used:
            event("fast path took frames")
        if used < len(data):
            events += conn.receive_data(data[used:])
    except h2.exceptions.ProtocolError as exc:
        return f"error {type(exc).__name__}"
    return [_event(e) for e in events]


def _state(conn: h2.connection.H2Connection) -> tuple[Any, ...]:
    streams = tuple(
        (
            sid,
            tuple(sorted(vars(s.state_machine).items())),
            tuple(sorted(vars(s._inbound_window_manager).items())),
            s._expected_content_length,
            s._actual_content_length,
        )
        for sid, s in sorted(conn.streams.items())
    )
    return (conn.state_machine.state, conn.inbound_flow_control_window, streams)


@FUZZ
@given(
    st.lists(_ACTION, max_size=30),
    st.lists(st.sampled_from([(), (), (1,), (5, 40), (9,), (200,)]), max_size=30),
)
def test_fast_path_matches_h2(actions: list[tuple[Any, ...]], cuts: list[Any]) -> None:
    """Any mix of response frames, each action's bytes cut anywhere (or not): the same events, errors,
    stream states, windows and bytes back as h2's parser alone."""
    fast, plain = _client(kernel=True), _client()
    srv = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    srv.initiate_connection()
    preface = fast.data_to_send()
    assert preface == plain.data_to_send()
    srv.receive_data(preface)
    settings_frames = srv.data_to_send()
    fast.receive_data(settings_frames)
    plain.receive_data(settings_frames)
    opening = [("headers", k, 0, 0) for k in range(len(STREAMS))]  # so that later frames can follow
    for i, action in enumerate(opening + actions):
        _serve(srv, action)
        data = srv.data_to_send()
        own = list(cuts[i - len(opening)]) if len(opening) <= i < len(opening) + len(cuts) else []
        last = 0
        for point in [*sorted({c % (len(data) + 1) for c in own}), len(data)]:
            if point > last:
                chunk = data[last:point]
                assert _feed(fast, chunk, True) == _feed(plain, chunk, False)
                assert _state(fast) == _state(plain)
                last = point
        back = fast.data_to_send()
        assert back == plain.data_to_send()
        if fast.state_machine.state is h2.connection.ConnectionState.CLOSED:
            break
        srv.receive_data(back)


def test_an_ordinary_response_skips_h2s_parser() -> None:
    """HEADERS + DATA(END_STREAM) of an answered call are taken by the fast path once the block is known,
    and h2's processing of that block (normalize, validate, decode) is done once and remembered."""
    conn = _client(kernel=True)
    srv = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    srv.initiate_connection()
    srv.receive_data(conn.data_to_send())
    conn.receive_data(srv.data_to_send())  # the server's SETTINGS
    taken = []
    for sid in STREAMS:
        srv.send_headers(sid, _headers(0, 0))
        srv.send_data(sid, b"body", end_stream=True)
        data = srv.data_to_send()
        events, used = take_response_frames(conn, data)
        if used < len(data):
            events += conn.receive_data(data[used:])
        taken.append(used == len(data))
        kinds = [type(e).__name__ for e in events]
        assert kinds == ["ResponseReceived", "DataReceived", "StreamEnded"]
        assert events[0].headers == [(":status", "200"), ("content-type", "application/proto")]
    assert taken[1:] == [True, True]  # the first block added to the dynamic table: hpack read it
    assert len(conn.processed_headers) == 1  # type: ignore[attr-defined]  # streams 3 and 5: one block


def test_real_calls_take_the_fast_path(memory: Callable[..., MemoryServer]) -> None:
    """Calls of the async Client against the reference server read their answers on the fast path."""

    async def main() -> int:
        async with memory() as server, server.client() as client:
            for i in range(5):
                info = await client.enqueue("t", b"%d" % i, queue="q", content_type="text/plain")
                assert (await client.get_task(info.id)).id == info.id
            conn = client._h2._conn  # type: ignore[union-attr]
            return int(conn.fast_reads)

    assert asyncio.run(main()) >= 8


def _ack_client() -> h2.connection.H2Connection:
    """A client with streams 1 and 5 answered and ended (1 retired), 3 answered but still open."""
    client = h2.connection.H2Connection(config=PLAIN_CLIENT_CONFIG)
    srv = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False))
    client.initiate_connection()
    srv.initiate_connection()
    srv.receive_data(client.data_to_send())
    client.receive_data(srv.data_to_send())
    for sid in (1, 3, 5):
        client.send_headers(sid, REQUEST, end_stream=True)
        srv.receive_data(client.data_to_send())
        srv.send_headers(sid, [(":status", "200")])
        srv.send_data(sid, b"x" * 16000, end_stream=sid != 3)
        client.receive_data(srv.data_to_send())
        if sid == 1:
            retire_closed(client)
    client.data_to_send()
    return client


def _windows(conn: h2.connection.H2Connection) -> list[dict[str, int]]:
    managers = [conn._inbound_flow_control_window_manager]
    managers += [s._inbound_window_manager for _, s in sorted(conn.streams.items())]
    return [vars(m) for m in managers]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([1, 2, 3, 5, 7, 0]), st.integers(-1, 40_000) | st.sampled_from([0, 8_000_000])
        ),
        max_size=12,
    )
)
def test_acknowledge_matches_h2(acks: list[tuple[int, int]]) -> None:
    """Any run of acknowledgements leaves both connections with the same bytes queued and windows."""
    fast, plain = _ack_client(), _ack_client()
    for sid, size in acks:
        outcome = []
        for conn in (fast, plain):
            try:
                if conn is fast:
                    queued = acknowledge(conn, sid, size)
                else:
                    conn.acknowledge_received_data(size, sid)
                    queued = None
                outcome.append(("ok", conn.data_to_send(), queued))
            except (ValueError, h2.exceptions.H2Error) as exc:
                outcome.append((type(exc).__name__, conn.data_to_send(), None))
        (kind, sent, queued), (plain_kind, plain_sent, _) = outcome
        assert (kind, sent) == (plain_kind, plain_sent)
        if queued is not None:
            assert queued or not sent  # False only when nothing was queued
        assert _windows(fast) == _windows(plain)
