"""The client's request fast path (``send_request``) against h2's own send path, and in real calls."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.exceptions
import h2.settings
from h2.connection import ConnectionState
from h2.stream import StreamState
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conveyor_sdk._h2kernel.client import CachingEncoder, Connection
from conveyor_sdk._h2kernel.client_fast import send_request
from conveyor_sdk._h2kernel.streams import retire_closed
from conveyor_sdk.testing.memory import MemoryServer
from tests._h2paths import FAST_ONLY

pytestmark = FAST_ONLY

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Codes = h2.settings.SettingCodes
LAST_ID = h2.connection.H2Connection.HIGHEST_ALLOWED_STREAM_ID

# A request (header variant, body size), or a server action: settings, window update, answer, reset, GOAWAY.
# A body size: fixed, or one of the send limits (connection window, stream window, frame size) plus -1/0/+1.
_BODY = st.one_of(
    st.sampled_from([0, 0, 1, 7, 100, 16_384, 16_385, 70_000]),
    st.tuples(st.sampled_from(["connection", "stream", "frame"]), st.sampled_from([-1, 0, 1])),
)
_REQUEST = st.tuples(st.just("request"), st.sampled_from(range(6)), _BODY)
_ACTION = st.one_of(
    _REQUEST,
    _REQUEST,
    st.tuples(
        st.just("settings"),
        st.sampled_from([None, 16_384, 20_000]),  # MAX_FRAME_SIZE
        st.sampled_from([None, 0, 10, 100, 65_535, 1 << 20]),  # INITIAL_WINDOW_SIZE
        st.sampled_from([None, 0, 1, 2, 100]),  # MAX_CONCURRENT_STREAMS
    ),
    st.tuples(st.just("window"), st.sampled_from([None, 0, 1, 2]), st.sampled_from([1, 100, 70_000])),
    st.tuples(st.just("answer"), st.sampled_from(range(3))),
    st.tuples(st.just("reset"), st.sampled_from(range(3))),
    st.tuples(st.just("goaway"), st.sampled_from([0, 2])),
)


def _headers(variant: int) -> list[tuple[str, str]]:
    base = [(":method", "POST"), (":scheme", "http"), (":path", "/a/B"), (":authority", "h:1")]
    if variant == 1:
        base.append(("content-type", "application/proto"))
    elif variant == 2:
        base += [("x-big", "{" * 10_000)]  # ~19 KB once Huffman-coded: HEADERS + CONTINUATION
    elif variant == 3:
        base = [(":authority", "other:2"), (":method", "GET"), (":scheme", "http"), (":path", "/")]
    elif variant == 4:
        base.append(("X-Mixed-Case", "v"))  # h2 lower-cases it when normalizing
    elif variant == 5:
        base.append(("connection", "close"))  # h2 refuses it when validating
    return base


def _body(conn: h2.connection.H2Connection, size: int | tuple[str, int]) -> bytes:
    if isinstance(size, tuple):
        limit, delta = size
        if limit == "connection":
            base = conn.outbound_flow_control_window
        elif limit == "stream":
            base = conn.remote_settings.initial_window_size
        else:
            base = conn.max_outbound_frame_size
        size = max(0, base + delta)
    return b"b" * size


def _client(checks: tuple[bool, bool]) -> h2.connection.H2Connection:
    conn = Connection(
        h2.config.H2Configuration(
            client_side=True,
            header_encoding="utf-8",
            validate_outbound_headers=checks[0],
            normalize_outbound_headers=checks[1],
        )
    )
    conn.encoder = CachingEncoder()
    conn.initiate_connection()
    return conn


def _send_rest(conn: h2.connection.H2Connection, sid: int, body: bytes, sent: int) -> int:
    """``H2Conn._send_some``: the rest of ``body`` through h2, as the windows allow."""
    try:
        while sent < len(body):
            window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            if window <= 0:
                break
            end = min(len(body), sent + window)
            conn.send_data(sid, body[sent:end], end_stream=end == len(body))
            sent = end
    except h2.exceptions.StreamClosedError:
        return len(body)
    return sent


def _open(conn: h2.connection.H2Connection, headers: list[tuple[str, str]], body: bytes, fast: bool) -> Any:
    """``H2Conn.start`` without the socket: the fast path when ``fast`` and it applies, else h2's."""
    # The fast path declines a stream h2 would open only before h2's first one, or with header checks on.
    may_decline = conn.state_machine.state is ConnectionState.IDLE or conn.config.validate_outbound_headers
    may_decline = may_decline or conn.config.normalize_outbound_headers
    opened = send_request(conn, headers, body) if fast else None
    if opened is not None:
        event("fast path opened the stream")
        sid, sent = opened
        if sent < len(body):
            event("fast path left the body to h2")
        return sid, _send_rest(conn, sid, body, sent)
    try:
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, headers, end_stream=not body)
    except h2.exceptions.H2Error as exc:
        if fast:
            event(f"fast path declined, h2 raised {type(exc).__name__}")
        return type(exc).__name__
    if fast:
        event("fast path declined, h2 opened the stream")
        assert may_decline
    return sid, _send_rest(conn, sid, body, 0) if body else 0


def _state(conn: h2.connection.H2Connection) -> tuple[Any, ...]:
    streams = tuple(
        (
            sid,
            s.state_machine.state,
            s.state_machine.client,
            s.state_machine.headers_sent,
            s.state_machine.stream_closed_by,
            s.outbound_flow_control_window,
            s.inbound_flow_control_window,
            s.max_outbound_frame_size,
            s._authority,
            s.request_method,
        )
        for sid, s in sorted(conn.streams.items())
    )
    table = conn.encoder.header_table
    return (
        conn.state_machine.state,
        conn.highest_outbound_stream_id,
        conn.outbound_flow_control_window,
        conn.inbound_flow_control_window,
        streams,
        dict(conn._closed_streams),
        list(table.dynamic_entries),
        table.maxsize,
    )


def _feed(conn: h2.connection.H2Connection, data: bytes) -> Any:
    """One read, then the retiring of closed streams H2Conn does after each read (the fast path
    counts open streams only near the limit, so it leaves that to the reads)."""
    try:
        events = [repr(e) for e in conn.receive_data(data)]
    except h2.exceptions.ProtocolError as exc:
        return f"error {type(exc).__name__}"
    retire_closed(conn)
    return events


def _serve(srv: h2.connection.H2Connection, action: tuple[Any, ...]) -> None:
    """One server action; one the server may not take in its state sends nothing."""
    kind = action[0]
    sids = sorted(srv.streams)
    pick = sids[action[1] % len(sids)] if sids and isinstance(action[1], int) else None
    try:
        if kind == "settings":
            new = {Codes.MAX_FRAME_SIZE: action[1], Codes.INITIAL_WINDOW_SIZE: action[2]}
            new[Codes.MAX_CONCURRENT_STREAMS] = action[3]
            srv.update_settings({k: v for k, v in new.items() if v is not None})
        elif kind == "window":
            srv.increment_flow_control_window(action[2], None if action[1] is None else pick)
        elif kind == "answer" and pick is not None:
            srv.send_headers(pick, [(":status", "200")])
            srv.send_data(pick, b"ok", end_stream=True)
        elif kind == "reset" and pick is not None:
            srv.reset_stream(pick)
        elif kind == "goaway":
            srv.close_connection(error_code=action[1], last_stream_id=srv.highest_inbound_stream_id)
    except (h2.exceptions.ProtocolError, h2.exceptions.FlowControlError, ValueError, KeyError):
        pass


def _exchange(fast: Any, plain: Any, srv: Any) -> None:
    """Move bytes both ways until quiet, asserting the two clients never differ."""
    for _ in range(10):
        out = fast.data_to_send()
        assert out == plain.data_to_send()
        if out:
            with contextlib.suppress(h2.exceptions.ProtocolError):  # its GOAWAY is in its output
                srv.receive_data(out)
        back = srv.data_to_send()
        if not back and not out:
            return
        assert _feed(fast, back) == _feed(plain, back)
        assert _state(fast) == _state(plain)


@FUZZ
@given(
    st.lists(_ACTION, min_size=2, max_size=25),
    st.sampled_from([(False, False)] * 4 + [(True, False), (False, True)]),
    st.sampled_from([0, 0, LAST_ID - 4]),
)
def test_fast_path_matches_h2(
    actions: list[tuple[Any, ...]], checks: tuple[bool, bool], start_id: int
) -> None:
    """Any mix of requests (bodies over the windows or the frame size, header blocks over a frame) and
    server settings, window updates, answers, resets and GOAWAYs: the same bytes, results, errors and
    h2 state (streams, windows, next stream id, HPACK table) as h2's own send path."""
    fast, plain = _client(checks), _client(checks)
    fast.highest_outbound_stream_id = plain.highest_outbound_stream_id = start_id
    srv = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    srv.initiate_connection()
    _exchange(fast, plain, srv)
    for action in [("request", 0, 0), *actions]:  # h2 leaves IDLE on its first stream
        if action[0] == "request":
            headers, body = _headers(action[1]), _body(plain, action[2])
            assert _open(fast, headers, body, True) == _open(plain, headers, body, False)
            for conn in (fast, plain):  # h2's send path retires closed streams as it counts; ours
                retire_closed(conn)  # leaves it to the reads: compare modulo when that happens
            assert _state(fast) == _state(plain)
        else:
            _serve(srv, action)
        _exchange(fast, plain, srv)


def test_an_ordinary_request_is_framed_directly() -> None:
    """Once the connection is open, a request is HEADERS and DATA(END_STREAM), both windows charged."""
    conn = _client((False, False))
    conn.send_headers(1, _headers(0), end_stream=True)  # h2 leaves IDLE on its first stream
    conn.data_to_send()
    window = conn.outbound_flow_control_window
    assert send_request(conn, _headers(1), b"body") == (3, 4)
    out = conn.data_to_send()
    block_len = int.from_bytes(out[:3], "big")
    assert out[3:9] == bytes((1, 4)) + (3).to_bytes(4, "big")  # HEADERS, END_HEADERS only
    data = out[9 + block_len :]
    assert data == (4).to_bytes(3, "big") + bytes((0, 1)) + (3).to_bytes(4, "big") + b"body"
    assert conn.outbound_flow_control_window == window - 4
    assert conn.streams[3].outbound_flow_control_window == 65_535 - 4
    assert conn.get_next_available_stream_id() == 5


def test_real_calls_take_the_fast_path(memory: Callable[..., MemoryServer]) -> None:
    """Calls of the async Client against the reference server send their requests on the fast path."""

    async def main() -> tuple[int, int]:
        async with memory() as server, server.client() as client:
            for i in range(5):
                info = await client.enqueue("t", b"%d" % i, queue="q", content_type="text/plain")
                assert (await client.get_task(info.id)).id == info.id
            conn = client._h2._conn  # type: ignore[union-attr]
            return int(conn.fast_sends), int(conn.h2.highest_outbound_stream_id)

    fast_sends, last_id = asyncio.run(main())
    assert last_id == 19  # ten calls, one stream each
    assert fast_sends >= 9  # all but the first: h2 is IDLE until its first stream


def test_the_fast_path_moves_streams_itself_and_knows_the_client_configuration() -> None:
    """With the installed h2 the three transitions are applied directly (the table check holds),
    and H2Conn's shared configuration is the one whose identity skips the option reads."""
    from conveyor_sdk._client.h2conn import H2Conn
    from conveyor_sdk._h2kernel import client, client_fast
    from conveyor_sdk._transport._connect import parse_target

    assert client_fast._OWN_SEND_TRANSITIONS
    config = client.PLAIN_CLIENT_CONFIG
    assert config.client_side
    assert not config.validate_outbound_headers and not config.normalize_outbound_headers

    async def conn_config() -> object:
        return H2Conn(parse_target("http://127.0.0.1:1")).h2.config

    assert asyncio.run(conn_config()) is config
    conn = Connection(config)
    conn.encoder = CachingEncoder()
    conn.initiate_connection()
    conn.send_headers(1, _headers(0), end_stream=True)
    assert send_request(conn, _headers(1), b"") == (3, 0)
    machine = conn.streams[3].state_machine
    assert machine.state is StreamState.HALF_CLOSED_LOCAL
    assert machine.client and machine.headers_sent
