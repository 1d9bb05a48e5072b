"""A whole unary request in one read (the kernel's take_unary): served without an h2 stream when it
is answered at once, and with h2's stream, as h2 would have left it, in every other case."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest

from conveyor_sdk._h2kernel.streams import retired_streams
from conveyor_server_min._http.h2conn import H2Connection
from conveyor_server_min._http.reply import plain_response
from tests.server_http.fakes import RecordingTransport

pytestmark = pytest.mark.h2_fast

CT = "application/proto"
REQUEST = [(":method", "POST"), (":scheme", "http"), (":path", "/p"), (":authority", "a"),
           ("content-type", CT)]  # fmt: skip


class _Router:
    """Answers ``ok`` in one step (``respond_whole``), or with a plain 500, or after ``go`` is set."""

    def __init__(self, mode: str = "whole") -> None:
        self.mode = mode
        self.go = asyncio.Event()
        self.bodies: list[bytes | None] = []
        self.cancelled = 0

    def runs_inline(self, io: Any) -> bool:
        return True

    def serve_whole(self, io: Any, body: bytes) -> Any:
        return self.handle(io, body)  # as the real router serves a format it has no one-step path for

    async def handle(self, io: Any, body: bytes | None = None) -> None:
        self.bodies.append(body)
        if self.mode == "wait":
            try:
                await self.go.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if self.mode == "error":
            plain_response(io, 500, "no")
        elif not io.respond_whole(CT, b"ok"):
            plain_response(io, 200, "ok")


def _connect(router: _Router) -> tuple[h2.connection.H2Connection, H2Connection, RecordingTransport]:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    transport = RecordingTransport()
    conn = H2Connection(transport, router, "peer")  # type: ignore[arg-type]
    conn.start(client.data_to_send())
    client.receive_data(bytes(transport.written))
    conn.data_received(client.data_to_send())  # SETTINGS ACK
    transport.written.clear()
    return client, conn, transport


def _call(client: h2.connection.H2Connection, conn: H2Connection, body: bytes = b"request") -> int:
    """Send one request as one read (HEADERS, then DATA with END_STREAM); its stream id."""
    sid = client.get_next_available_stream_id()
    client.send_headers(sid, REQUEST)
    client.send_data(sid, body, end_stream=True)
    conn.data_received(client.data_to_send())
    return sid


def _answers(client: h2.connection.H2Connection, transport: RecordingTransport) -> list[tuple[str, Any]]:
    events = client.receive_data(bytes(transport.written))
    transport.written.clear()
    out: list[tuple[str, Any]] = []
    for e in events:
        if isinstance(e, h2.events.ResponseReceived):
            out.append(("status", dict(e.headers or ())[b":status"]))
        elif isinstance(e, h2.events.DataReceived):
            out.append(("data", e.data))
        elif isinstance(e, h2.events.StreamEnded | h2.events.StreamReset):
            out.append((type(e).__name__, e.stream_id))
    return out


def test_a_whole_request_answered_at_once_never_gets_an_h2_stream() -> None:
    async def main() -> None:
        router = _Router()
        client, conn, transport = _connect(router)
        _call(client, conn)  # the first block fills the HPACK table: h2 reads it
        assert _answers(client, transport) == [("status", b"200"), ("data", b"ok"), ("StreamEnded", 1)]
        assert router.bodies == [None]  # the generic path: the handler read the body from the stream
        for sid in (3, 5, 7):
            before = retired_streams(conn.h2)
            assert _call(client, conn) == sid
            assert _answers(client, transport) == [("status", b"200"), ("data", b"ok"), ("StreamEnded", sid)]
            assert sid not in conn.h2.streams and not conn.streams
            assert retired_streams(conn.h2) == before + 1  # recorded closed, as h2 records a retired stream
        assert router.bodies[1:] == [b"request"] * 3  # taken: the body was handed over whole
        assert conn.held_bytes == 0
        assert conn.h2.highest_inbound_stream_id == 7

    asyncio.run(main())


def test_a_taken_request_whose_handler_waits_gets_h2s_stream_before_the_read_ends() -> None:
    """Its stream is HALF_CLOSED_REMOTE in h2 once the read is over, so a later RST_STREAM on it
    cancels the handler instead of being a connection error; the connection serves on."""

    async def main() -> None:
        router = _Router("wait")
        client, conn, transport = _connect(router)
        _call(client, conn)
        await asyncio.sleep(0)
        router.go.set()
        await asyncio.wait(list(conn.tasks), timeout=5)
        _answers(client, transport)
        router.go.clear()
        sid = _call(client, conn)
        assert router.bodies[-1] == b"request"  # taken
        stream = conn.h2.streams[sid]
        assert stream.state_machine.state.name == "HALF_CLOSED_REMOTE"
        client.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        conn.data_received(client.data_to_send())
        await asyncio.wait(list(conn.tasks), timeout=5)
        assert router.cancelled == 1 and not conn.streams
        router.mode = "whole"
        sid = _call(client, conn)
        assert _answers(client, transport)[-3:] == [("status", b"200"), ("data", b"ok"), ("StreamEnded", sid)]

    asyncio.run(main())


def test_a_taken_request_answered_otherwise_goes_through_h2() -> None:
    async def main() -> None:
        router = _Router("error")
        client, conn, transport = _connect(router)
        for sid in (1, 3):
            _call(client, conn)
            assert _answers(client, transport) == [("status", b"500"), ("data", b"no"), ("StreamEnded", sid)]
        assert router.bodies == [None, b"request"]
        assert not conn.streams and not conn.h2.streams

    asyncio.run(main())


def test_a_wrong_content_length_is_still_h2s_protocol_error() -> None:
    """A repeated header block (one the kernel could take) whose content-length the body does not
    match: h2's connection error, as before, and no handler."""

    async def main() -> None:
        router = _Router()
        client, conn, transport = _connect(router)
        headers = [*REQUEST, ("content-length", "9")]
        for sid, body in ((1, b"123456789"), (3, b"123456789")):  # the second block is a repeat: taken
            client.send_headers(sid, headers)
            client.send_data(sid, body, end_stream=True)
            conn.data_received(client.data_to_send())
            assert _answers(client, transport)[-1] == ("StreamEnded", sid)
        assert router.bodies == [None, b"123456789"]
        client.send_headers(5, headers)
        client.send_data(5, b"1234567", end_stream=True)
        conn.data_received(client.data_to_send())
        events = client.receive_data(bytes(transport.written))
        assert [(type(e).__name__, getattr(e, "error_code", None)) for e in events] == [
            ("ConnectionTerminated", h2.errors.ErrorCodes.PROTOCOL_ERROR)
        ]
        assert len(router.bodies) == 2  # no handler for it

    asyncio.run(main())


def test_two_requests_in_one_read_take_the_generic_path() -> None:
    async def main() -> None:
        router = _Router()
        client, conn, transport = _connect(router)
        _call(client, conn)
        _answers(client, transport)
        for sid in (3, 5):
            client.send_headers(sid, REQUEST)
            client.send_data(sid, b"request", end_stream=True)
        conn.data_received(client.data_to_send())
        got = _answers(client, transport)
        assert ("StreamEnded", 3) in got and ("StreamEnded", 5) in got
        assert router.bodies == [None, None, None]

    asyncio.run(main())
