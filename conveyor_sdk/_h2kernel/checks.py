"""The import-time probe: every internal the fast path uses is there and behaves as it expects.

Two kinds of check, both run once per process when the kernel is first imported (a few ms):

* **Presence**: each private attribute, hook and transition-table row the fast path reads or
  writes exists, with the type it expects.
* **Behaviour**: one request and its answer go through the fast path (client send, server read,
  server DATA send, client read, the GOAWAY rule, a session's DATA taker) and through h2's public
  API on a twin pair of connections; the bytes on the wire and the events must be the same.

Any failure (a mismatch or an exception) moves the process to the public path, logged once
(:func:`.probe.use_public`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
from h2.connection import ConnectionState
from h2.frame_buffer import FrameBuffer
from h2.stream import H2Stream

from conveyor_sdk._h2kernel import client_answer, client_fast, eager, probe, server, server_conn
from conveyor_sdk._h2kernel.client import PLAIN_CLIENT_CONFIG, CachingEncoder, Connection
from conveyor_sdk._h2kernel.hpackfast import FastDecoder
from conveyor_sdk._h2kernel.streams import retire_closed

__all__ = ["run"]

_HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/p.S/M"),
    (":authority", "x"),
    ("te", "trailers"),
]
_BODY = b"\0\0\0\0\x03abc"


class ProbeFailed(Exception):
    pass


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise ProbeFailed(what)


def _has(obj: object, names: str, kind: type | None = None) -> None:
    for name in names.split():
        _need(hasattr(obj, name), f"{type(obj).__name__}.{name} is missing")
        if kind is not None:
            _need(
                isinstance(getattr(obj, name), kind), f"{type(obj).__name__}.{name} is not a {kind.__name__}"
            )


def _presence() -> None:
    conn = h2.connection.H2Connection()
    _has(conn, "_data_to_send", bytearray)
    _has(conn, "_open_streams _prepare_for_sending _terminate_connection _receive_goaway_frame")
    _has(conn, "_receive_headers_frame")
    _has(conn, "highest_inbound_stream_id", int)
    _has(conn, "_closed_streams", dict)
    window = getattr(conn, "_inbound_flow_control_window_manager", None)
    _need(window is not None, "H2Connection._inbound_flow_control_window_manager is missing")
    _has(window, "current_window_size _bytes_processed max_window_size", int)
    _has(window, "window_consumed")
    buffer = FrameBuffer(server=True)
    _has(buffer, "_data", bytearray)
    _has(buffer, "_headers_buffer", list)
    _has(buffer, "_preamble_len", int)
    _has(buffer, "_update_header_buffer")
    stream = H2Stream(1, config=conn.config, inbound_window_size=65535, outbound_window_size=65535)
    _has(stream, "_inbound_window_manager _expected_content_length _actual_content_length _authority")
    _has(stream, "_initialize_content_length receive_data receive_headers")
    _has(stream, "_build_hdr_validation_flags _process_received_headers")
    _has(stream.state_machine, "headers_sent stream_closed_by client")
    _has(conn.encoder.header_table, "resized", bool)
    for settings in (conn.local_settings, conn.remote_settings):  # server_conn._INITIAL_WINDOW's store
        _has(settings, "_settings", dict)
        _need(
            settings._settings[server_conn._INITIAL_WINDOW][0] == settings.initial_window_size,
            "h2.settings.Settings._settings holds no current initial_window_size",
        )
    _need(client_fast._OWN_SEND_TRANSITIONS, "h2.stream._transitions: the request-sending rows changed")
    _need(client_answer._OWN_RECV_TRANSITIONS, "h2.stream._transitions: the response-receiving rows changed")
    _has(stream.state_machine, "headers_received state")
    stream.state_machine.client = True
    flags = stream._build_hdr_validation_flags([h2.events.ResponseReceived(stream_id=1)])
    _need(flags == client_answer.RESPONSE_FLAGS, "h2 validates response headers with other flags")
    _need(server._OWN_TRANSITIONS, "h2.stream._transitions: the request-receiving rows changed")
    if not eager.PUBLIC_EAGER and sys.version_info < (3, 12):
        _need(
            callable(eager._enter_task) and callable(eager._leave_task),
            "asyncio.tasks._enter_task is missing",
        )


def _pair(
    make_client: Callable[[], h2.connection.H2Connection], fast_server: bool
) -> tuple[h2.connection.H2Connection, h2.connection.H2Connection, Any]:
    client = make_client()
    srv: h2.connection.H2Connection
    if fast_server:
        srv, frames = server_conn.new_server_h2(
            max_streams=100, stream_window=1 << 20, max_header_bytes=16384, max_empty_frames=100
        )
    else:
        srv, frames = h2.connection.H2Connection(config=server_conn.SERVER_CONFIG), None
    client.initiate_connection()
    srv.initiate_connection()
    srv.receive_data(client.data_to_send())
    client.receive_data(srv.data_to_send())
    srv.receive_data(client.data_to_send())
    client.data_to_send()
    return client, srv, frames


def _shape(events: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for e in events:
        fields = ("stream_id", "headers", "data", "flow_controlled_length", "error_code", "last_stream_id")
        out.append((type(e).__name__, *(_plain(getattr(e, f, None)) for f in fields)))
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [tuple(map(bytes_or_str, item)) for item in value]
    return value


def bytes_or_str(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _fast_client() -> h2.connection.H2Connection:
    conn = Connection(config=PLAIN_CLIENT_CONFIG)
    conn.encoder = CachingEncoder()
    return conn


def _round_trip() -> None:
    fc, fs, frames = _pair(_fast_client, True)
    pc, ps, _ = _pair(lambda: h2.connection.H2Connection(config=PLAIN_CLIENT_CONFIG), False)
    for client, srv in ((fc, fs), (pc, ps)):  # h2 opens the connection (IDLE until a first stream)
        client.send_headers(1, _HEADERS, end_stream=True)
        srv.receive_data(client.data_to_send())
    opened = client_fast.send_request(fc, _HEADERS, _BODY)
    _need(opened == (3, len(_BODY)), f"send_request opened {opened!r}")
    request = fc.data_to_send()
    pc.send_headers(3, _HEADERS)
    pc.send_data(3, _BODY, end_stream=True)
    _need(request == pc.data_to_send(), "send_request wrote other bytes than h2")
    fast_events, used = server.take_frames(fs, frames, request)
    _need(used == len(request), "take_frames left a plain request to h2")
    _need(_shape(fast_events) == _shape(ps.receive_data(request)), "take_frames gave other events than h2")
    _need(server_conn.acknowledge(fs, 3, len(_BODY)) is False, "acknowledge sent a WINDOW_UPDATE early")
    ps.acknowledge_received_data(len(_BODY), 3)
    _need(fs.data_to_send() == ps.data_to_send(), "acknowledge queued other bytes than h2")
    for srv in (fs, ps):
        srv.send_headers(3, [(":status", "200")])  # static-table fields: readable without hpack
    server_conn.send_data(fs, 3, _BODY, False)
    ps.send_data(3, _BODY)
    for srv in (fs, ps):
        srv.end_stream(3)
    answer = fs.data_to_send()
    _need(answer == ps.data_to_send(), "send_data wrote other bytes than h2")
    fc.decoder = FastDecoder()
    fast_events, used = client_fast.take_response_frames(fc, answer)
    _need(used == len(answer), "take_response_frames left a plain answer to h2")
    _need(_shape(fast_events) == _shape(pc.receive_data(answer)), "take_response_frames gave other events")
    retire_closed(fc)
    _need(3 not in fc.streams, "retire_closed kept a closed stream")


def _repeated_answer() -> None:
    """The same response block read twice (the second time from ``processed_headers``): the same
    events and stream state as h2's ``receive_data`` on a twin pair, for answers with and without
    a body, and trailers."""
    fc, fs, _ = _pair(_fast_client, False)
    pc, ps, _ = _pair(lambda: h2.connection.H2Connection(config=PLAIN_CLIENT_CONFIG), False)
    fc.decoder = FastDecoder()
    answer = [(":status", "200"), ("content-type", "application/proto"), ("content-length", "3")]
    for sid in (1, 3, 5, 7, 9):
        for client, srv in ((fc, fs), (pc, ps)):
            client.send_headers(sid, _HEADERS, end_stream=True)
            srv.receive_data(client.data_to_send())
            srv.send_headers(sid, answer, end_stream=sid == 9)  # 9: headers only
            if sid < 7:  # gRPC: trailers end it
                srv.send_data(sid, b"abc")
                srv.send_headers(sid, [("grpc-status", "0")], end_stream=True)
            elif sid == 7:  # Connect: the DATA frame ends it
                srv.send_data(sid, b"abc", end_stream=True)
        data = fs.data_to_send()
        _need(data == ps.data_to_send(), "the twin servers answered differently")
        fast_events, used = client_fast.take_response_frames(fc, data)
        if sid == 1:  # the first answer adds its fields to the HPACK table: h2 reads it
            fast_events += fc.receive_data(data[used:])
        else:
            _need(used == len(data), "take_response_frames left a repeated answer to h2")
        _need(
            _shape(fast_events) == _shape(pc.receive_data(data)),
            "a remembered header block gave other events",
        )
        fast, public = fc.streams[sid], pc.streams[sid]
        _need(
            vars(fast.state_machine) == vars(public.state_machine),
            "a remembered block moved the stream otherwise",
        )
        _need(
            (fast._expected_content_length, fast._actual_content_length)
            == (public._expected_content_length, public._actual_content_length),
            "a remembered block counted the content length otherwise",
        )
        _need(
            vars(fast._inbound_window_manager) == vars(public._inbound_window_manager),
            "a remembered answer charged the stream's window otherwise",
        )
    _need(len(getattr(fc, "processed_headers", ())) == 2, "response header blocks were not remembered")


def _acknowledged() -> None:
    """client_answer.acknowledge and h2's acknowledge_received_data on twin connections: the same
    bytes queued and the same window counts, for an open stream, a retired one, and an amount
    that reopens the connection's window (a WINDOW_UPDATE)."""
    pairs = [_pair(lambda: h2.connection.H2Connection(config=PLAIN_CLIENT_CONFIG), False) for _ in "fp"]
    for client, srv, _ in pairs:
        for sid in (1, 3):
            client.send_headers(sid, _HEADERS, end_stream=True)
            srv.receive_data(client.data_to_send())
            srv.send_headers(sid, [(":status", "200")])
            srv.send_data(sid, _BODY, end_stream=sid == 1)
        client.receive_data(srv.data_to_send())
        retire_closed(client)
    (fc, _, _), (pc, _, _) = pairs
    _need(1 not in fc.streams and 3 in fc.streams, "the twin's streams are not as expected")
    half = fc._inbound_flow_control_window_manager.max_window_size // 2
    for sid, size in ((1, len(_BODY)), (3, len(_BODY)), (3, half)):
        queued = client_answer.acknowledge(fc, sid, size)
        pc.acknowledge_received_data(size, sid)
        sent = fc.data_to_send()
        _need(sent == pc.data_to_send(), "acknowledge queued other bytes than h2")
        _need(queued == bool(sent), "acknowledge misreported a WINDOW_UPDATE")
        windows = [
            (c._inbound_flow_control_window_manager.__dict__, c.streams[3]._inbound_window_manager.__dict__)
            for c in (fc, pc)
        ]
        _need(windows[0] == windows[1], "acknowledge counted the windows otherwise than h2")


def _unary_answer() -> None:
    """send_unary and h2's send_headers + send_data(end_stream=True): the same events at the client,
    the same stream state and windows at the server."""
    seen, states = [], []
    for fast in (True, False):
        client, srv, _ = _pair(lambda: h2.connection.H2Connection(config=PLAIN_CLIENT_CONFIG), True)
        client.send_headers(1, _HEADERS)
        client.send_data(1, _BODY, end_stream=True)
        srv.receive_data(client.data_to_send())
        if fast:
            _need(server_conn.send_unary(srv, 1, "application/proto", b"abc"), "send_unary declined")
        else:
            fields = [(":status", "200"), ("content-type", "application/proto"), ("content-length", "3")]
            srv.send_headers(1, fields)
            srv.send_data(1, b"abc", end_stream=True)
        seen.append(_shape(client.receive_data(srv.data_to_send())))
        stream = srv.streams[1]
        states.append((vars(stream.state_machine), stream.outbound_flow_control_window,
                       srv.outbound_flow_control_window))  # fmt: skip
    _need(seen[0] == seen[1], "send_unary gave the client other events than h2")
    _need(states[0] == states[1], "send_unary left the stream otherwise than h2")


def _taken_request() -> None:
    """A request taken whole (take_unary) and answered (send_unary), and one taken and then given
    to h2 (open_taken): the same bytes, client events, stream state, windows and record of closed
    streams as h2's receive_data and answer on a twin pair."""
    pairs = [_pair(lambda: h2.connection.H2Connection(config=PLAIN_CLIENT_CONFIG), True) for _ in "fp"]
    fields = [(":status", "200"), ("content-type", "application/proto"), ("content-length", "3")]
    for sid in (1, 3, 5):  # the first block adds its fields to the HPACK table: h2 reads it
        sent = []
        for client, _srv, _frames in pairs:
            client.send_headers(sid, _HEADERS)
            client.send_data(sid, _BODY, end_stream=True)
            sent.append(client.data_to_send())
        _need(sent[0] == sent[1], "the twin clients sent different requests")
        (fc, fs, frames), (pc, ps, _) = pairs
        taken = server.take_unary(fs, frames, sent[0])
        ps.receive_data(sent[1])
        if sid == 1:
            _need(taken is None, "take_unary took a block that changes the HPACK table")
            fs.receive_data(sent[0])
        else:
            _need(taken is not None and taken[0] == sid and taken[2] == _BODY, "take_unary declined")
            _need(sid not in fs.streams, "take_unary gave h2 a stream")
        if sid == 5 and taken is not None:
            server.open_taken(fs, sid, taken[1], taken[2])
            fast, public = fs.streams[sid], ps.streams[sid]
            _need(
                vars(fast.state_machine) == vars(public.state_machine),
                "open_taken moved the stream otherwise",
            )
            _need(
                (fast._expected_content_length, fast._actual_content_length,
                 fast._inbound_window_manager.current_window_size, fast.outbound_flow_control_window)
                == (public._expected_content_length, public._actual_content_length,
                    public._inbound_window_manager.current_window_size, public.outbound_flow_control_window),
                "open_taken counted the stream otherwise",
            )  # fmt: skip
        _need(server_conn.send_unary(fs, sid, "application/proto", b"abc"), "send_unary declined")
        ps.send_headers(sid, fields)
        ps.send_data(sid, b"abc", end_stream=True)
        answers = fs.data_to_send(), ps.data_to_send()  # HPACK: ours are literals, h2 indexes
        _need(
            _shape(fc.receive_data(answers[0])) == _shape(pc.receive_data(answers[1])),
            "the client saw otherwise",
        )
        for srv in (fs, ps):
            server_conn.acknowledge(srv, sid, len(_BODY))
            retire_closed(srv)
        _need(fs.data_to_send() == ps.data_to_send(), "acknowledging a taken request queued other bytes")
        for attr in ("_closed_streams", "highest_inbound_stream_id", "outbound_flow_control_window"):
            _need(getattr(fs, attr) == getattr(ps, attr), f"a taken request left {attr} otherwise")
        window = fs._inbound_flow_control_window_manager, ps._inbound_flow_control_window_manager
        _need(vars(window[0]) == vars(window[1]), "a taken request counted the connection window otherwise")
        _need(not fs.streams and not fs.unanswered, "a taken request left a stream behind")  # type: ignore[attr-defined]


def _session_and_goaway() -> None:
    fc, fs, _ = _pair(lambda: Connection(config=h2.config.H2Configuration(client_side=True)), True)
    fc.send_headers(1, _HEADERS)
    fs.receive_data(fc.data_to_send())
    fs.send_headers(1, [(":status", "200")])
    fc.receive_data(fs.data_to_send())
    taker = client_fast.DataFrameTaker(fc, 1)
    window = fc._inbound_flow_control_window_manager.current_window_size
    server_conn.send_data(fs, 1, _BODY, False)
    payloads, used = taker.take(fs.data_to_send())
    _need(payloads == [_BODY] and used == 9 + len(_BODY), "DataFrameTaker did not take a plain DATA frame")
    charged = window - fc._inbound_flow_control_window_manager.current_window_size
    _need(charged == len(_BODY), "DataFrameTaker charged the window wrongly")
    fs.close_connection(0, last_stream_id=1)
    events = fc.receive_data(fs.data_to_send())
    _need(any(isinstance(e, h2.events.ConnectionTerminated) for e in events), "GOAWAY gave no event")
    _need(fc.state_machine.state is ConnectionState.CLIENT_OPEN, "a graceful GOAWAY closed our stream")


def run() -> None:
    """Run every check; on the first failure leave the fast path (logged once)."""
    if not probe.fast:
        return
    try:
        _presence()
        _round_trip()
        _repeated_answer()
        _acknowledged()
        _unary_answer()
        _taken_request()
        _session_and_goaway()
    except ProbeFailed as exc:
        probe.use_public(f"the import-time check failed ({exc})")
    except Exception as exc:
        probe.use_public(f"the import-time check raised {exc!r}")
