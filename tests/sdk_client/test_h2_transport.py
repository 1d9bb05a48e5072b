"""The async Client's own HTTP/2 transport: multiplexing, limits, reconnects, GOAWAY, flow control, errors."""

from __future__ import annotations

import asyncio
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pyqwest
import pytest
from hpack import NeverIndexedHeaderTuple

from conveyor_sdk._client.h2transport import H2Transport
from conveyor_sdk._h2kernel.streams import retired_streams
from conveyor_sdk.client import Client, RetryConfig
from conveyor_sdk.errors import DeadlineExceeded, NotFound, Unavailable
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_server_min.testing import ServerProcess
from tests.sdk_client._h2peer import Knobs, UnaryPeer
from tests.sdk_transport._helpers import make_certs

ONCE = RetryConfig(attempts=1)
CANCEL = 0x8


async def until(cond: Callable[[], bool], within: float = 10.0) -> None:
    """Wait for ``cond()`` (polling), failing after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not cond():  # noqa: ASYNC110  # the peer's state has no event to wait on
            await asyncio.sleep(0.01)


def test_concurrent_calls_share_one_connection(memory: Callable[..., MemoryServer]) -> None:
    """64 concurrent enqueues against the reference server use one connection and all commit."""

    async def main() -> None:
        async with memory() as server, server.client() as client:
            assert client._h2 is not None
            infos = await asyncio.gather(*(client.enqueue("h2:many", {"i": i}) for i in range(64)))
            assert len({info.id for info in infos}) == 64
            assert client._h2.connections == 1
            assert [(await client.get_task(info.id)).payload for info in infos[:3]] == [
                b'{"i":0}',
                b'{"i":1}',
                b'{"i":2}',
            ]

    asyncio.run(main())


def test_streams_overlap_and_respect_max_concurrent_streams() -> None:
    """Calls run on parallel streams, but never more at once than the server's MAX_CONCURRENT_STREAMS."""

    async def main() -> None:
        async with UnaryPeer(Knobs(max_streams=2, delay=0.05)) as peer, Client(peer.url) as client:
            await client.enqueue("warm")  # SETTINGS are known from here on
            infos = await asyncio.gather(*(client.enqueue("limited") for _ in range(8)))
            assert len({i.id for i in infos}) == 8
            assert peer.seen.peak_open == 2
            assert peer.seen.connections == 1

    asyncio.run(main())


def test_reconnects_after_server_restart(server_factory: Callable[..., ServerProcess]) -> None:
    """When the server restarts on the same port, the next call opens a new connection."""
    first = server_factory()
    port = first.url.rsplit(":", 1)[1]

    async def main() -> None:
        async with Client(first.url) as client:
            assert client._h2 is not None
            await client.enqueue("before")
            await asyncio.to_thread(first.stop)
            with pytest.raises(Unavailable):
                await client.enqueue("while down", rpc_timeout=5)
            second = await asyncio.to_thread(server_factory, ["--port", port])
            assert second.url == first.url
            info = await client.enqueue("after")
            assert (await client.get_task(info.id)).type == "after"
            assert client._h2.connections == 2

    asyncio.run(main())


def test_goaway_moves_new_calls_to_a_new_connection() -> None:
    """After a graceful GOAWAY the answered call succeeds and the next one uses a new connection."""

    async def main() -> None:
        async with UnaryPeer(Knobs(goaway_after=1)) as peer, Client(peer.url) as client:
            assert (await client.enqueue("one")).id == "t-1"
            assert (await client.enqueue("two")).id == "t-2"
            assert peer.seen.connections == 2

    asyncio.run(main())


def test_goaway_fails_unprocessed_streams_retryably() -> None:
    """Streams above GOAWAY's last-stream-id fail Unavailable; with task_id they are retried and land."""

    async def main() -> None:
        async with UnaryPeer(Knobs(goaway_after=1, delay=0.05)) as peer, Client(peer.url) as client:
            results = await asyncio.gather(
                *(client.enqueue("x", task_id=f"id-{i}") for i in range(3)), return_exceptions=True
            )
            assert not [r for r in results if isinstance(r, BaseException)]
            assert peer.seen.connections >= 2
        async with (
            UnaryPeer(Knobs(goaway_after=1, delay=0.05)) as peer,
            Client(peer.url, retry=ONCE) as client,
        ):
            results = await asyncio.gather(*(client.enqueue("x") for _ in range(3)), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            assert len(errors) == 2
            assert all(isinstance(e, Unavailable) and "GOAWAY" in str(e) for e in errors), errors

    asyncio.run(main())


def test_large_payloads_both_ways(memory: Callable[..., MemoryServer]) -> None:
    """Near-limit payloads cross both directions' flow-control windows, several at once."""
    blobs = [bytes([i]) * (1_000_000 - i) for i in range(4)]

    async def main() -> None:
        async with memory() as server, server.client() as client:
            infos = await asyncio.gather(
                *(client.enqueue("big", b, content_type="application/octet-stream") for b in blobs)
            )
            back = await asyncio.gather(*(client.get_task(i.id) for i in infos))
            assert [t.payload for t in back] == blobs

    asyncio.run(main())


def test_deadline_resets_the_stream() -> None:
    """A call past its deadline raises DeadlineExceeded and the server sees RST_STREAM(CANCEL)."""

    async def main() -> None:
        async with UnaryPeer(Knobs(answer=False)) as peer, Client(peer.url) as client:
            with pytest.raises(DeadlineExceeded):
                await client.enqueue("slow", rpc_timeout=0.2)
            await until(lambda: peer.seen.resets == [CANCEL])
            assert peer.seen.requests[0]["connect-timeout-ms"] == "200"

    asyncio.run(main())


def test_cancellation_resets_the_stream_and_keeps_the_connection() -> None:
    """Cancelling a call resets only its stream; the next call reuses the connection."""

    async def main() -> None:
        async with UnaryPeer(Knobs(answer=False)) as peer, Client(peer.url) as client:
            call = asyncio.create_task(client.enqueue("cancel me"))
            await until(lambda: len(peer.seen.requests) == 1)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await until(lambda: peer.seen.resets == [CANCEL])
            peer.knobs.answer = True
            assert (await client.enqueue("next")).id == "t-1"
            assert peer.seen.connections == 1

    asyncio.run(main())


def test_connection_refused_is_unavailable() -> None:
    """Nothing listening: Unavailable naming the address, not a foreign exception."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def main() -> None:
        async with Client(f"http://127.0.0.1:{port}", retry=ONCE) as client:
            with pytest.raises(Unavailable, match=f"cannot connect to 127.0.0.1:{port}"):
                await client.get_task("x")

    asyncio.run(main())


def test_http1_server_is_unavailable() -> None:
    """A server that answers in HTTP/1.1 is reported as such."""

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(reply, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, Client(f"http://127.0.0.1:{port}", retry=ONCE) as client:
            with pytest.raises(Unavailable, match="HTTP/1"):
                await client.get_task("x")

    asyncio.run(main())


def test_connection_lost_mid_call_is_unavailable() -> None:
    """The server's socket dies while a call waits: Unavailable, and the next call reconnects."""

    async def main() -> None:
        async with UnaryPeer(Knobs(answer=False)) as peer, Client(peer.url, retry=ONCE) as client:
            call = asyncio.create_task(client.enqueue("lost"))
            await until(lambda: len(peer.seen.requests) == 1)
            for writer in peer._writers:
                writer.transport.abort()
            with pytest.raises(Unavailable, match="lost"):
                await call
            peer.knobs.answer = True
            assert (await client.enqueue("again")).id == "t-1"
            assert peer.seen.connections == 2

    asyncio.run(main())


def test_closed_client_refuses_calls(memory: Callable[..., MemoryServer]) -> None:
    """A call after aclose() is a non-retryable Unavailable, not a hang."""

    async def main() -> None:
        async with memory() as server:
            client = server.client()
            await client.enqueue("open")
            await client.aclose()
            with pytest.raises(Unavailable, match="closed"):
                await client.enqueue("closed")

    asyncio.run(main())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_tls_untrusted_certificate(tmp_path: Path, server_factory: Callable[..., ServerProcess]) -> None:
    """Over https:// without our CA the async client fails verification (not retried)."""
    certs = make_certs(tmp_path)
    server = server_factory(
        ["--dev", "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    )

    async def main() -> None:
        async with Client(server.url) as client:
            with pytest.raises(Unavailable, match="certificate verification failed") as info:
                await client.get_task("x")
            assert client.statistics()["retries"] == 0
            assert info.value.retryable is False
        async with Client(server.url, tls_ca_cert=certs.ca.read_bytes()) as client:
            assert (await client.enqueue("tls")).type == "tls"

    asyncio.run(main())


def test_header_lists_are_built_once_per_distinct_request() -> None:
    """A repeated request reuses its header list; authorization stays never-indexed, hop-by-hop fields go."""
    transport = H2Transport("http://h:1")

    def request(path: str, **headers: str) -> pyqwest.Request:
        return pyqwest.Request("POST", f"http://h:1{path}", headers=pyqwest.Headers(list(headers.items())))

    first = transport._headers(request("/a/b", Authorization="Bearer x", Connection="close", X_A="1"))
    assert first == [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/a/b"),
        (":authority", "h:1"),
        ("authorization", "Bearer x"),
        ("x_a", "1"),
    ]
    assert isinstance(first[4], NeverIndexedHeaderTuple)
    assert transport._headers(request("/a/b", Authorization="Bearer x", Connection="close", X_A="1")) is first
    other = transport._headers(request("/a/b", Authorization="Bearer y", Connection="close", X_A="1"))
    assert other[4] == ("authorization", "Bearer y")
    assert transport._headers(request("/c")) == [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/c"),
        (":authority", "h:1"),
    ]
    with pytest.raises(Unavailable, match="only talks to"):
        transport._headers(pyqwest.Request("POST", "http://elsewhere:2/a"))


def test_finished_streams_leave_h2s_table(memory: Callable[..., MemoryServer]) -> None:
    """The send path counts open streams only near the server's limit; reads retire finished
    streams, so h2's stream table does not grow with the calls made."""

    async def main() -> tuple[int, int]:
        async with memory() as server, server.client() as client:
            for i in range(30):
                await client.enqueue("h2:retire", {"i": i})
            conn = client._h2._conn  # type: ignore[union-attr]
            return len(conn.h2.streams), retired_streams(conn.h2)

    held, retired = asyncio.run(main())
    assert held == 0
    assert retired == 30


def test_each_call_ends_at_its_own_deadline_on_a_shared_connection() -> None:
    """Calls share one deadline timer: a later call with a nearer deadline ends first, the other after."""

    async def main() -> None:
        async with UnaryPeer(Knobs(answer=False)) as peer, Client(peer.url, retry=ONCE) as client:
            loop = asyncio.get_running_loop()
            began = loop.time()
            slow = asyncio.create_task(client.enqueue("far", rpc_timeout=1.5))
            await until(lambda: len(peer.seen.requests) == 1)
            with pytest.raises(DeadlineExceeded):
                await client.enqueue("near", rpc_timeout=0.1)
            assert loop.time() - began < 1.4
            assert not slow.done()  # the nearer deadline ended only its own call
            with pytest.raises(DeadlineExceeded):
                await slow
            assert loop.time() - began >= 1.5
            await until(lambda: peer.seen.resets == [CANCEL, CANCEL])

    asyncio.run(main())


def test_answered_calls_reuse_the_connections_deadline_timer() -> None:
    """Sequential calls with one timeout arm the connection's deadline timer once, not once per call."""

    async def main() -> None:
        async with UnaryPeer() as peer, Client(peer.url, timeout=30) as client:
            await client.enqueue("first")
            assert client._h2 is not None and client._h2._conn is not None
            conn = client._h2._conn
            timer = conn.deadlines.armed
            assert timer is not None and not timer.cancelled()
            for _ in range(5):
                await client.enqueue("next")
            assert conn.deadlines.armed is timer and not timer.cancelled()
            async with Client(peer.url, timeout=None) as untimed:  # no deadline: no timer at all
                await untimed.enqueue("untimed")
                assert untimed._h2 is not None and untimed._h2._conn is not None
                assert untimed._h2._conn.deadlines.armed is None

    asyncio.run(main())


def test_answers_with_different_headers_on_one_connection_are_each_read_as_sent() -> None:
    """A connection remembers the header blocks it has converted; each answer is still read by its own."""

    async def main() -> None:
        async with UnaryPeer() as peer, Client(peer.url, retry=ONCE) as client:
            assert (await client.enqueue("ok")).id == "t-1"
            body = b'{"code":"not_found","message":"no such queue"}'
            peer.knobs.reply = (404, [("content-type", "application/json")], body)
            for _ in range(2):
                with pytest.raises(NotFound, match="no such queue"):
                    await client.enqueue("missing")
            peer.knobs.reply = None
            assert (await client.enqueue("ok again")).id == "t-4"
            assert client._h2 is not None and client._h2.connections == 1

    asyncio.run(main())
