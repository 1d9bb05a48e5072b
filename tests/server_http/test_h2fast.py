"""The request fast path (_h2kernel.server.take_frames) behaves exactly like h2's own frame parser."""

from __future__ import annotations

import contextlib
from typing import Any

import h2.config
import h2.connection
import h2.exceptions
import h2.settings
import hpack
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conveyor_sdk._h2kernel.guard import FRAMES_PER_TURN
from conveyor_sdk._h2kernel.server import take_frames
from conveyor_sdk._h2kernel.server_conn import acknowledge, send_data
from conveyor_sdk._h2kernel.server_conn import new_server_h2 as _new_server_h2
from conveyor_sdk._h2kernel.streams import retire_closed
from conveyor_server_min._http.limits import HttpLimits
from tests._h2paths import FAST_ONLY

pytestmark = FAST_ONLY

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = HttpLimits(max_streams=3, max_header_bytes=600, max_empty_frames=4)
PATH = b"/conveyor.v1.TaskService/Enqueue"


def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream_id.to_bytes(4, "big") + payload


def new_server_h2(limits: HttpLimits, window: int) -> Any:
    return _new_server_h2(
        max_streams=limits.max_streams,
        stream_window=window,
        max_header_bytes=limits.max_header_bytes,
        max_empty_frames=limits.max_empty_frames,
    )


class Side:
    """One server connection fed either through the fast path or through h2 alone."""

    def __init__(self, fast: bool, window: int = 1 << 20) -> None:
        self.fast = fast
        self.conn, self.frames = new_server_h2(LIMITS, window)
        self.conn.initiate_connection()
        self.conn.data_to_send()
        self.used = 0

    def feed(self, data: bytes, budget: int) -> tuple[Any, ...]:
        """What one read produces: events (or the error), bytes to send, guard state."""
        self.frames.budget, self.frames.throttled = budget, False
        try:
            events, used = take_frames(self.conn, self.frames, data) if self.fast else ([], 0)
            self.used += used
            if used < len(data) or not used:
                events += self.conn.receive_data(data[used:])
            outcome: Any = [_event(e) for e in events]
        except h2.exceptions.ProtocolError as exc:
            outcome = ("error", type(exc).__name__, exc.error_code)
        finally:
            # As H2Connection does on every read (the fast path skips h2's count), a read that ends in
            # a connection error included: h2 had already retired the closed streams when it raised.
            retire_closed(self.conn)
        return outcome, self.conn.data_to_send(), self.frames.throttled, self.frames.empty_frames

    def state(self) -> tuple[Any, ...]:
        conn = self.conn
        streams = {sid: _stream_state(s) for sid, s in conn.streams.items()}
        return (
            conn.state_machine.state,
            conn.highest_inbound_stream_id,
            vars(conn._inbound_flow_control_window_manager),
            streams,
            dict(conn._closed_streams),
            list(conn.decoder.header_table.dynamic_entries),
            bytes(self.frames._data),
        )


def _stream_state(stream: Any) -> tuple[Any, ...]:
    """Everything an h2 stream holds: its own fields, its state machine's and its window's."""
    own = {k: v for k, v in vars(stream).items() if k not in ("state_machine", "_inbound_window_manager")}
    return (sorted(own.items()), vars(stream.state_machine), vars(stream._inbound_window_manager))


def _event(e: Any) -> tuple[str, list[tuple[str, str]]]:
    return type(e).__name__, sorted((k, repr(v)) for k, v in vars(e).items())


_encoder_headers = st.lists(
    st.sampled_from(
        [
            (b"content-type", b"application/proto"),
            (b"connect-timeout-ms", b"30000"),
            (b"x-custom", b"v" * 30),
            (b"authorization", b"Bearer t"),
            (b"content-length", b"5"),
            (b"content-length", b"x"),
            (b":status", b"100"),
        ]
    ),
    max_size=4,
)

_BODY = st.sampled_from([0, 5, 40, 700, 1500])  # 1500: beyond the small stream window

# Client actions: ("req", extra headers, body size, end on headers, pad, huffman) | ("raw", frame)
# | ("same", times, body size or None: the last request's headers again)
# | ("rst",) | ("ping",) | ("window",) | ("settings",) | ("respond",)
# | ("ack", n, on the lowest open stream | the last one opened, closed or not | one never opened)
_REQUEST = st.tuples(
    st.just("req"),
    _encoder_headers,
    _BODY,
    st.booleans(),
    st.sampled_from([None, None, None, None, None, 0, 3]),
    st.booleans(),
)
_ACTION = st.one_of(
    _REQUEST,
    _REQUEST,
    _REQUEST,
    st.tuples(st.just("same"), st.integers(1, 3), st.just(None)),
    st.tuples(st.just("same"), st.integers(1, 3), _BODY),  # cached headers, another body
    st.tuples(
        st.just("raw"),
        st.sampled_from([0x0, 0x1, 0x3, 0x8, 0x9, 0x0C]),
        st.sampled_from([0x0, 0x1, 0x4, 0x5, 0x8, 0x20, 0x24, 0x2]),
        st.sampled_from([0, 1, 2, 3, 5, 7, 9, 0x80000001]),
        st.binary(max_size=12),
    ),
    st.tuples(st.just("rst")),
    st.tuples(st.just("ping")),
    st.tuples(st.just("window")),
    st.tuples(st.just("settings")),
    st.tuples(st.just("respond")),
    st.tuples(
        st.just("ack"),
        st.one_of(st.integers(0, 800), st.sampled_from([32_767, 40_000, 600_000])),
        st.sampled_from(["open", "open", "last", "new"]),
    ),
)


class Client:
    """A client writing requests with a real HPACK encoder, plus raw frames of any kind."""

    def __init__(self) -> None:
        self.encoder = hpack.Encoder()
        self.next_id = 1
        self.out = bytearray(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(0x4, 0, 0, b""))

    def request(
        self, extra: list[tuple[bytes, bytes]], body: int, end: bool, pad: int | None, huff: bool
    ) -> None:
        sid, self.next_id = self.next_id, self.next_id + 2
        headers = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", PATH), *extra]
        block = self.encoder.encode(headers, huffman=huff)
        end_now = end or not body
        flags = 0x4 | (0x1 if end_now else 0)
        if pad is None:
            self.out += _frame(0x1, flags, sid, block)
        else:
            self.out += _frame(0x1, flags | 0x8, sid, bytes([pad]) + block + b"\0" * pad)
        if not end_now:
            self.out += _frame(0x0, 0x1, sid, b"b" * body)


def _run(actions: list[tuple[Any, ...]], cuts: list[int], budget: int, window: int = 1 << 20) -> Side:
    sides = [Side(True, window), Side(False, window)]
    client = Client()
    preface, client.out = bytes(client.out), bytearray()
    assert sides[0].feed(preface, budget) == sides[1].feed(preface, budget)
    last_request: tuple[Any, ...] = ()
    for action in actions:
        if action[0] in ("respond", "ack"):
            _server_action(sides, action)
            assert sides[0].state() == sides[1].state()
            continue
        if action[0] == "req":
            last_request = action[1:]
        _write(client, action, last_request)
        data, client.out = bytes(client.out), bytearray()
        points = sorted({c % (len(data) + 1) for c in cuts})
        last = 0
        for p in [*points, len(data)]:
            if p > last:
                got = [side.feed(data[last:p], budget) for side in sides]
                assert got[0] == got[1]
                failed = isinstance(got[0][0], tuple)
                # After a connection error the frames left unread are dropped (H2Connection.
                # connection_lost): the fast path never buffers the rest of the read, h2 has.
                assert (
                    sides[0].state()[: -1 if failed else None] == sides[1].state()[: -1 if failed else None]
                )
                last = p
                if failed:
                    return sides[0]  # a connection error: both sent the same GOAWAY
    return sides[0]


def _write(client: Client, action: tuple[Any, ...], last_request: tuple[Any, ...]) -> None:
    kind = action[0]
    if kind == "req":
        client.request(*action[1:])
    elif kind == "same":
        headers, body, *rest = last_request or ((), 0)
        for _ in range(action[1] if last_request else 0):
            client.request(headers, body if action[2] is None else action[2], *rest)
    elif kind == "raw":
        client.out += _frame(*action[1:])
    elif kind == "rst":
        client.out += _frame(0x3, 0, max(1, client.next_id - 2), b"\0\0\0\x08")
    elif kind == "ping":
        client.out += _frame(0x6, 0, 0, b"12345678")
    elif kind == "window":
        client.out += _frame(0x8, 0, 0, b"\0\0\x10\0")
    else:
        client.out += _frame(0x4, 0, 0, b"\0\x01\0\0\0\x40")  # SETTINGS: HEADER_TABLE_SIZE 64


def _server_action(sides: list[Side], action: tuple[Any, ...]) -> None:
    """Answer the lowest open stream, or acknowledge received bytes on it, the same way on both sides."""
    outcomes = []
    for side in sides:
        conn = side.conn
        open_ids = sorted(sid for sid, s in conn.streams.items() if not s.closed)
        if action[0] == "ack" and action[2] != "open":
            last = conn.highest_inbound_stream_id
            open_ids = [last if action[2] == "last" and last else last + 2]
        try:
            if not open_ids:
                outcomes.append(None)
                continue
            if action[0] == "respond":
                conn.send_headers(open_ids[0], [(":status", "200")], end_stream=True)
            elif side.fast:
                acknowledge(conn, open_ids[0], action[1])
            else:
                conn.acknowledge_received_data(action[1], open_ids[0])
            outcomes.append((open_ids[0], conn.data_to_send()))
        except h2.exceptions.H2Error as exc:
            outcomes.append(("error", type(exc).__name__))
    assert outcomes[0] == outcomes[1]


@FUZZ
@given(
    st.lists(_ACTION, min_size=2, max_size=20),
    st.one_of(st.just([]), st.lists(st.integers(min_value=0), max_size=8)),
    st.sampled_from([FRAMES_PER_TURN, 9, 2]),
    st.sampled_from([1 << 20, 1000]),
)
def test_fast_path_matches_h2(
    actions: list[tuple[Any, ...]], cuts: list[int], budget: int, window: int
) -> None:
    """Requests (indexed or literal headers, padded, with or without body, bad content-length, a body
    beyond the stream window), raw frames of any type and flags, resets, pings, settings and answers,
    cut anywhere and read under any frame budget, give the same events, errors, output bytes, stream
    states (every field of the stream, its state machine and window), windows and HPACK table."""
    fast = _run(actions, cuts, budget, window)
    event("fast path used" if fast.used else "fast path not used")


@pytest.mark.parametrize("window", [1 << 20, 1000])
@pytest.mark.parametrize(
    "extra",
    [([], 5), ([(b"content-length", b"5")], 5), ([(b"content-length", b"40")], 40),
     ([(b":status", b"200"), (b"content-length", b"40")], 40)],
)  # fmt: skip
def test_stream_steps_match_h2_at_their_limits(
    extra: tuple[list[tuple[bytes, bytes]], int], window: int
) -> None:
    """A valid request, then the same headers again (now the fast path) with every body size: within and
    beyond the stream window, matching and contradicting content-length, none at all: same as h2."""
    headers, first = extra
    used = 0
    for body in (0, 5, 40, 1500):
        for end in (False, True):
            two = [("req", headers, first, False, None, False), ("same", 2, body)]
            used += _run(two, [], FRAMES_PER_TURN, window).used
            answered = [("req", headers, first, end, None, True), ("same", 1, body), ("respond",)]
            used += _run(answered, [7], 9, window).used
    assert used


def _open_pair() -> tuple[list[Side], Client]:
    """Both sides after one whole request on stream 1 (the connection is then SERVER_OPEN)."""
    sides, client = [Side(True), Side(False)], Client()
    client.request([], 5, False, None, False)
    for side in sides:
        side.feed(bytes(client.out), FRAMES_PER_TURN)
    client.out = bytearray()
    return sides, client


def _same(sides: list[Side], data: bytes) -> tuple[Any, ...]:
    got = [side.feed(data, FRAMES_PER_TURN) for side in sides]
    assert got[0] == got[1]
    assert sides[0].state()[:-1] == sides[1].state()[:-1]
    return got[0]


@pytest.mark.parametrize("window", [1 << 20, 1000])
def test_acknowledge_matches_h2_around_the_update_thresholds(window: int) -> None:
    """Acknowledging bytes below, at and above where h2 reopens a window (half of it; any 1024 bytes
    once it is empty), on open, half-closed, closed and unknown streams: same output and windows."""
    sizes = [1, 499, 500, 1023, 1024, 1025, 32_767, 40_000, 524_288, 600_000]
    states: list[list[tuple[Any, ...]]] = [
        [("req", [], window, False, None, False)],  # a body that empties the stream window
        [("req", [], 5, False, None, False)],  # half-closed (remote)
        [("req", [], 5, False, None, False), ("respond",)],  # closed
    ]
    for before in states:
        for target in ("open", "last", "new"):
            for size in sizes:
                _run(
                    [*before, ("ack", size, target), ("ack", size, target), ("ack", 1, target)], [], 9, window
                )


def test_informational_status_in_a_request_is_left_to_h2() -> None:
    """A request block with ``:status: 1xx`` that the fast decoder can read (no indexing) fails as in h2."""
    sides, _ = _open_pair()
    path = b"/p"
    block = b"\x83\x86\x04" + bytes([len(path)]) + path + b"\x08\x03100"  # :status literal, not indexed
    assert sides[0].conn.decoder.decode_cached(block) is not None  # the fast path reads it
    assert _same(sides, _frame(0x1, 0x4, 3, block))[0][0] == "error"


def test_data_on_streams_the_fast_path_does_not_step() -> None:
    """Data past content-length before END_STREAM, data after our response (HALF_CLOSED_LOCAL), data
    after the client's END_STREAM: the same events, errors and states as h2."""
    cases = [
        (b"5", [_frame(0x0, 0x0, 3, b"b" * 12)]),
        (b"5", ["respond", "respond", _frame(0x0, 0x1, 3, b"b" * 5)]),  # answer stream 1, then 3
        (b"5", ["respond", "respond", _frame(0x0, 0x0, 3, b"b" * 2), _frame(0x0, 0x1, 3, b"b" * 3)]),
        (b"5", [_frame(0x0, 0x1, 3, b"b" * 5), _frame(0x0, 0x1, 3, b"b")]),
    ]
    for length, steps in cases:
        sides, client = _open_pair()
        client.request([(b"content-length", length)], 5, False, None, False)
        _same(sides, bytes(client.out[: -len(_frame(0x0, 0x1, 3, b"b" * 5))]))  # HEADERS only
        for step in steps:
            if step == "respond":
                _server_action(sides, ("respond",))
            else:
                _same(sides, step)


def test_unary_request_read_takes_no_h2_parsing() -> None:
    """A second Enqueue-shaped read (HEADERS + DATA with END_STREAM) goes wholly through the fast path."""
    side = Side(True)
    client = Client()
    for i in range(2):
        client.request([(b"content-type", b"application/proto")], 5, False, None, True)
        data, client.out = bytes(client.out), bytearray()
        events, _, _, _ = side.feed(data, FRAMES_PER_TURN)
        assert [name for name, _ in events][-3:] == ["RequestReceived", "DataReceived", "StreamEnded"]
        if i == 0:
            assert side.used < len(data)  # the preface, SETTINGS and an indexing header block go to h2
    assert side.used > 0 and side.conn.streams[3].state_machine.state.name == "HALF_CLOSED_REMOTE"


def test_padded_data_and_foreign_frames_are_left_to_h2() -> None:
    """Padding, PING and a DATA frame on an unknown stream stop the fast path; h2 reads them."""
    side = Side(True)
    client = Client()
    client.request([], 5, True, None, False)  # END_STREAM on HEADERS: no body
    side.feed(bytes(client.out), FRAMES_PER_TURN)
    used = side.used
    for frame in (_frame(0x0, 0x8, 1, b"\x00ab"), _frame(0x6, 0, 0, b"12345678"), _frame(0x0, 0, 9, b"x")):
        side.feed(frame, FRAMES_PER_TURN)
        assert side.used == used


def test_data_on_the_fast_path_resets_the_empty_frame_count() -> None:
    """Empty DATA frames count towards ENHANCE_YOUR_CALM only while no payload arrives in between."""
    side = Side(True)
    client = Client()
    client.request([], 5, False, None, False)
    client.out = client.out[: -len(_frame(0x0, 0x1, 1, b"b" * 5))]  # stream 1 stays open
    side.feed(bytes(client.out), FRAMES_PER_TURN)
    empty = _frame(0x0, 0, 1, b"") * LIMITS.max_empty_frames
    for _ in range(3):
        side.feed(empty, FRAMES_PER_TURN)
        used = side.used
        outcome = side.feed(_frame(0x0, 0, 1, b"x"), FRAMES_PER_TURN)[0]
        assert side.used > used and outcome[0][0] == "DataReceived"
    assert side.frames.empty_frames == 0


# Server-side sends: ("send", stream index, size, end) | ("window", stream index or None, n)
# | ("settings", initial window, max frame size) | ("rst", stream index)
_SEND = st.one_of(
    st.tuples(
        st.just("send"),
        st.integers(0, 2),
        st.sampled_from([0, 1, 100, 16_384, 16_385, 70_000]),
        st.booleans(),
    ),
    st.tuples(st.just("window"), st.sampled_from([None, 0, 1]), st.integers(1, 100_000)),
    st.tuples(
        st.just("settings"), st.sampled_from([0, 50, 65_535, 1 << 20]), st.sampled_from([16_384, 20_000])
    ),
    st.tuples(st.just("rst"), st.integers(0, 2)),
)


def _send_pair() -> tuple[list[Any], h2.connection.H2Connection]:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    for sid in (1, 3, 5):
        client.send_headers(
            sid, [(":method", "POST"), (":scheme", "http"), (":path", "/p"), (":authority", "a")]
        )
    data = client.data_to_send()
    servers = [new_server_h2(LIMITS, 1 << 20)[0] for _ in range(2)]
    for conn in servers:
        conn.initiate_connection()
        conn.receive_data(data)
    client.receive_data(servers[0].data_to_send())
    servers[1].data_to_send()
    for conn in servers:
        conn.receive_data(client.data_to_send())
        conn.data_to_send()
    return servers, client


@FUZZ
@given(st.lists(_SEND, max_size=20))
def test_fast_send_matches_h2(actions: list[tuple[Any, ...]]) -> None:
    """DATA of any size on open, half-closed and reset streams, under changing windows and frame sizes,
    leaves the same bytes, windows, stream states and errors as h2's send_data."""
    servers, client = _send_pair()
    fast_used = False
    for action in actions:
        if action[0] == "send":
            sid, size, end = 1 + 2 * action[1], action[2], action[3]
            outcomes = []
            for i, conn in enumerate(servers):
                before = len(conn._data_to_send)
                try:
                    if i == 0:
                        send_data(conn, sid, bytearray(b"d" * size), end)
                    else:
                        conn.send_data(sid, b"d" * size, end_stream=end)
                    outcomes.append(("ok", conn.data_to_send()))
                except h2.exceptions.H2Error as exc:
                    outcomes.append(("error", type(exc).__name__, len(conn._data_to_send) - before))
            fast_used = fast_used or (outcomes[0][0] == "ok" and not end and size > 0)
            assert outcomes[0] == outcomes[1]
        else:
            _client_action(client, action)
            data = client.data_to_send()
            got = []
            for conn in servers:
                try:
                    got.append(([type(e).__name__ for e in conn.receive_data(data)], conn.data_to_send()))
                except h2.exceptions.ProtocolError as exc:
                    got.append((["error", type(exc).__name__], conn.data_to_send()))
            assert got[0] == got[1]
        assert [_send_state(c) for c in servers[:1]] == [_send_state(c) for c in servers[1:]]
    event("fast send used" if fast_used else "fast send not used")


def _client_action(client: h2.connection.H2Connection, action: tuple[Any, ...]) -> None:
    with contextlib.suppress(h2.exceptions.H2Error):
        if action[0] == "window":
            sid = None if action[1] is None else 1 + 2 * action[1]
            client.increment_flow_control_window(action[2], stream_id=sid)
        elif action[0] == "settings":
            client.update_settings(
                {
                    h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: action[1],
                    h2.settings.SettingCodes.MAX_FRAME_SIZE: action[2],
                }
            )
        else:
            client.reset_stream(1 + 2 * action[1])


def _send_state(conn: h2.connection.H2Connection) -> tuple[Any, ...]:
    return (
        conn.outbound_flow_control_window,
        {sid: (s.state_machine.state, s.outbound_flow_control_window) for sid, s in conn.streams.items()},
        conn.state_machine.state,
    )
