"""HTTP/2 abuse from one client stays bounded: rapid reset, huge frames, header blocks, floods, stalls."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.settings
import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_server_min._http.h2conn import H2Connection
from conveyor_server_min._http.limits import HttpLimits, WindowCounter
from conveyor_server_min._http.wire import encode_message

from .._util import wait_until
from .fakes import ENQUEUE, SESSION, FakeServices, ThreadServer
from .h2client import H2Client

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _serve(**limits: Any) -> ThreadServer:
    return ThreadServer(FakeServices(), http=HttpLimits(**limits))


@pytest.fixture
def tight() -> Iterator[ThreadServer]:
    """A server with small reset and empty-frame budgets and sub-second timeouts."""
    limits = {"max_resets": 20, "max_pings": 50, "max_empty_frames": 8, "body_timeout": 0.3}
    with _serve(**limits) as srv:
        yield srv


def _h2_impls(server: ThreadServer) -> list[H2Connection]:
    assert server.server is not None and server.server._hub is not None
    return [c.impl for c in server.server._hub.connections if isinstance(c.impl, H2Connection)]


def _open_streams(server: ThreadServer) -> int:
    return int(server.call(lambda: sum(len(c.streams) + len(c.tasks) for c in _h2_impls(server))))


async def _ok_call(port: int) -> None:
    """A well-behaved client on another connection is served normally."""
    client = await H2Client().connect("127.0.0.1", port)
    try:
        sid = await client.open(ENQUEUE)
        await client.send_msg(sid, pb.EnqueueRequest(type="fine").SerializeToString(), end=True)
        assert (await client.wait(sid)).trailers.get("grpc-status") == "0"
    finally:
        await client.close()


def _goaway_code(raw: bytes) -> int | None:
    """The error code of the first GOAWAY frame in a server byte stream, if any."""
    offset = 0
    while offset + 9 <= len(raw):
        length = int.from_bytes(raw[offset : offset + 3], "big")
        if raw[offset + 3] == 0x7 and offset + 9 + length <= len(raw):
            return int(struct.unpack_from(">I", raw, offset + 13)[0])
        offset += 9 + length
    return None


def _read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    chunks = []
    try:
        while data := sock.recv(65536):
            chunks.append(data)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def test_rapid_reset_leaves_no_stream_or_task_behind() -> None:
    """HEADERS + RST_STREAM in one read start no handler, and nothing stays in the connection's tables."""
    with _serve(max_resets=10_000) as server:

        async def main() -> None:
            client = await H2Client().connect("127.0.0.1", server.port)
            for _ in range(300):
                await client.open_and_reset(SESSION)
            await client.ping()
            wait_until(lambda: _open_streams(server) == 0, 10, what="streams and tasks forgotten")
            await client.ping()  # the connection itself is unharmed
            await _ok_call(server.port)
            await client.close()

        asyncio.run(main())


def test_reset_flood_ends_with_enhance_your_calm(tight: ThreadServer) -> None:
    """More than max_resets RST_STREAM frames in the window: GOAWAY(ENHANCE_YOUR_CALM), others unaffected."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", tight.port)
        with contextlib.suppress(ConnectionError):  # the server may close mid-write
            for _ in range(40):
                if client.closed.is_set():
                    break
                await client.open_and_reset(SESSION)
        await client.wait_closed()
        assert client.goaway is not None
        assert client.goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        await client.close()
        await _ok_call(tight.port)

    asyncio.run(main())


def test_reset_budget_is_per_client_so_reconnecting_does_not_refill_it(tight: ThreadServer) -> None:
    """After one connection spent the client's reset budget, a new one is calmed at its first reset."""

    async def spend(client: H2Client, count: int) -> None:
        with contextlib.suppress(ConnectionError):  # the server may close mid-write
            for _ in range(count):
                if client.closed.is_set():
                    break
                await client.open_and_reset(SESSION)
        await client.wait_closed()
        assert client.goaway is not None
        assert client.goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        await client.close()

    async def main() -> None:
        await spend(await H2Client().connect("127.0.0.1", tight.port), 40)
        await spend(await H2Client().connect("127.0.0.1", tight.port), 1)

    asyncio.run(main())


def test_oversized_frame_header_is_refused_before_its_body_arrives(tight: ThreadServer) -> None:
    """A frame header announcing 16 MiB gets GOAWAY(FRAME_SIZE_ERROR) at once, not after 16 MiB arrive."""
    with socket.create_connection(("127.0.0.1", tight.port)) as sock:
        huge_data = ((1 << 24) - 1).to_bytes(3, "big") + b"\x00\x00\x00\x00\x00\x01"
        sock.sendall(PREFACE + EMPTY_SETTINGS + huge_data + b"x" * 4096)
        raw = _read_until_closed(sock)
    assert _goaway_code(raw) == h2.errors.ErrorCodes.FRAME_SIZE_ERROR


def test_header_block_over_the_cap_closes_the_connection(tight: ThreadServer) -> None:
    """A 70 KB header block (HEADERS + CONTINUATION) is refused; a normal client is still served."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", tight.port)
        await client.open(ENQUEUE, extra={"x-big": "v" * 70_000})
        await client.wait_closed()
        assert client.goaway is not None and client.goaway.error_code != 0
        await client.close()
        await _ok_call(tight.port)

    asyncio.run(main())


def test_endless_continuation_frames_are_cut_off_at_the_header_cap(tight: ThreadServer) -> None:
    """HEADERS + CONTINUATION frames that never end the block: closed once max_header_bytes is passed."""
    fragment = b"\x00" * 16_000

    def frame(kind: int) -> bytes:
        return len(fragment).to_bytes(3, "big") + bytes([kind, 0]) + (1).to_bytes(4, "big") + fragment

    with socket.create_connection(("127.0.0.1", tight.port)) as sock:
        sock.sendall(PREFACE + EMPTY_SETTINGS + frame(0x1) + frame(0x9) * 4)
        raw = _read_until_closed(sock)
    assert _goaway_code(raw) == h2.errors.ErrorCodes.PROTOCOL_ERROR


def test_empty_data_frame_flood_ends_with_enhance_your_calm(tight: ThreadServer) -> None:
    """Consecutive empty DATA frames beyond max_empty_frames: GOAWAY(ENHANCE_YOUR_CALM)."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", tight.port)
        sid = await client.open(SESSION)
        for _ in range(50):
            if client.closed.is_set():
                break
            await client.send(sid, b"")
            client.conn.send_data(sid, b"")
            await client._flush()
        await client.wait_closed()
        assert client.goaway is not None
        assert client.goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        await client.close()

    asyncio.run(main())


PING = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + b"12345678"


def test_ping_flood_ends_with_enhance_your_calm(tight: ThreadServer) -> None:
    """More than max_pings PING frames in the window: GOAWAY(ENHANCE_YOUR_CALM)."""
    with socket.create_connection(("127.0.0.1", tight.port)) as sock:
        sock.sendall(PREFACE + EMPTY_SETTINGS + PING * 60)
        raw = _read_until_closed(sock)
    assert _goaway_code(raw) == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM


def test_ping_flood_from_a_client_that_never_reads_stays_bounded() -> None:
    """The server stops reading while its writes are paused, so unread PING ACKs cannot pile up."""
    with _serve(max_pings=10**9) as tight:
        _flood_pings_without_reading(tight)


def _flood_pings_without_reading(tight: ThreadServer) -> None:
    burst = PING * 1024
    with socket.create_connection(("127.0.0.1", tight.port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock.sendall(PREFACE + EMPTY_SETTINGS)
        wait_until(lambda: tight.call(lambda: len(_h2_impls(tight))) == 1, 10, what="h2 connection")

        def shrink() -> None:  # small kernel buffers: back-pressure shows after KiBs, not MiBs
            for impl in _h2_impls(tight):
                impl.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

        tight.call(shrink)
        sock.settimeout(1.0)
        deadline, blocked = time.monotonic() + 30, False
        while time.monotonic() < deadline and not blocked:
            try:
                sock.send(burst)
            except TimeoutError:
                blocked = True  # the server stopped reading
        held = tight.call(lambda: max(c.transport.get_write_buffer_size() for c in _h2_impls(tight)))
    assert blocked, "the server kept reading pings it could not answer"
    assert held < 1 << 20


def test_stream_that_never_sends_fails_after_body_timeout(tight: ThreadServer) -> None:
    """A unary stream without body bytes, and a Session without Hello, end deadline_exceeded."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", tight.port)
        unary = await client.open(ENQUEUE)
        session = await client.open(SESSION)
        for sid in (unary, session):
            st = await client.wait(sid, timeout=10)
            assert st.trailers.get("grpc-status") == "4" or st.headers.get("grpc-status") == "4"
        await client.close()

    asyncio.run(main())


def test_idle_connection_gets_goaway_and_is_closed() -> None:
    """An HTTP/2 connection with no stream for idle_timeout gets GOAWAY(NO_ERROR) and is closed."""
    with _serve(idle_timeout=0.3) as server:

        async def main() -> None:
            client = await H2Client().connect("127.0.0.1", server.port)
            await client.wait_closed(10)
            assert client.goaway is not None and client.goaway.error_code == 0
            await client.close()

        asyncio.run(main())


def test_reset_of_a_refused_stream_while_draining_keeps_the_connection() -> None:
    """During shutdown, HEADERS + RST_STREAM for a new stream do not break the connection's reader."""
    with _serve(max_resets=10_000) as server:

        async def main() -> None:
            client = await H2Client().connect("127.0.0.1", server.port)
            slow = await client.open(ENQUEUE)
            await client.send_msg(slow, pb.EnqueueRequest(type="slow").SerializeToString(), end=True)
            wait_until(lambda: _open_streams(server) > 0, 10, what="slow call running")
            assert server.server is not None
            stopping = asyncio.run_coroutine_threadsafe(server.server.stop(), server.loop)
            wait_until(lambda: server.call(lambda: all(c._draining for c in _h2_impls(server))), 10)
            await client.open_and_reset(ENQUEUE)
            await client.ping()
            stopping.result(20)
            await client.close()

        asyncio.run(main())


def test_connections_beyond_the_per_client_cap_are_closed() -> None:
    """A client address holding max_connections_per_client connections cannot open another."""
    with _serve(max_connections_per_client=3) as server:
        socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]
        try:
            wait_until(lambda: server.call(lambda: len(server.server._hub.connections)) == 3, 10)  # type: ignore[union-attr]
            with socket.create_connection(("127.0.0.1", server.port)) as extra:
                assert _read_until_closed(extra) == b""
            socks[0].sendall(PREFACE + EMPTY_SETTINGS)
            socks[0].settimeout(10)
            assert socks[0].recv(9)[3] == 0x4  # still served: the server's SETTINGS
        finally:
            for sock in socks:
                sock.close()
        asyncio.run(_ok_call(server.port))


def test_window_counter_counts_per_window() -> None:
    """WindowCounter passes its limit only within one window and starts over in the next."""
    counter = WindowCounter(3, 10.0)
    assert [counter.hit(t) for t in (0.0, 1.0, 2.0, 3.0)] == [False, False, False, True]
    assert counter.hit(10.5) is False  # a new window


def test_pending_output_beyond_the_cap_drops_the_connection() -> None:
    """A client that opens huge windows and never reads: past max_pending_output the server drops it."""
    with _serve(max_pending_output=1024) as server:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1}
        )
        conn.initiate_connection()
        conn.increment_flow_control_window(2**30)
        request = [(":method", "POST"), (":scheme", "http"), (":authority", "t"), (":path", SESSION)]
        conn.send_headers(1, [*request, ("content-type", "application/grpc")])
        hello = pb.WorkerMessage(hello=pb.Hello(queues={"q": 1}, labels={"dispatch": "64", "size": "65536"}))
        conn.send_data(1, encode_message(hello.SerializeToString()))
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            hub = server.server._hub  # type: ignore[union-attr]
            wait_until(lambda: server.call(lambda: len(hub.connections)) == 1, 10, what="accepted")  # type: ignore[union-attr]

            def shrink() -> None:
                for c in hub.connections:  # type: ignore[union-attr]
                    c.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

            server.call(shrink)
            sock.sendall(conn.data_to_send())
            wait_until(lambda: server.call(lambda: len(hub.connections)) == 0, 20, what="dropped")  # type: ignore[union-attr]
