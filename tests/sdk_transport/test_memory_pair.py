"""The in-memory connection pair acts as a socket towards its protocols: order, back-pressure, EOF, reset."""

from __future__ import annotations

import asyncio

import pytest

from conveyor_sdk._h2kernel.memory import connect_pair
from conveyor_sdk._transport import TransportOptions, open_session
from conveyor_sdk.errors import Unavailable
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_server_min.config import ServerConfig
from conveyor_server_min.server import Server
from tests._util import until


class Recorder(asyncio.Protocol):
    """Records every callback the transport makes."""

    def __init__(self, *, keep_open_on_eof: bool = False) -> None:
        self.events: list[object] = []
        self.data = bytearray()
        self.keep_open_on_eof = keep_open_on_eof
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.data += data

    def eof_received(self) -> bool:
        self.events.append("eof")
        return self.keep_open_on_eof

    def pause_writing(self) -> None:
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.events.append("resume")

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append(("lost", type(exc).__name__ if exc else None))


class Buffered(asyncio.BufferedProtocol):
    """A buffered protocol with a small buffer, so one write arrives in several pieces."""

    def __init__(self) -> None:
        self.data = bytearray()
        self._buf = bytearray(7)

    def get_buffer(self, sizehint: int) -> bytearray:
        return self._buf

    def buffer_updated(self, nbytes: int) -> None:
        self.data += self._buf[:nbytes]


def test_bytes_arrive_in_order_on_a_later_turn() -> None:
    """Writes reach the peer in order, never inside the write call itself."""

    async def main() -> None:
        client, server = Recorder(), Recorder()
        ct, _ = connect_pair(client, server)
        assert client.events == ["made"] and server.events == ["made"]
        ct.write(b"one ")
        ct.write(b"two")
        assert server.data == b""  # not synchronously
        await until(lambda: server.data == b"one two", timeout=5)

    asyncio.run(main())


def test_buffered_protocols_get_every_byte() -> None:
    """A BufferedProtocol is filled through get_buffer/buffer_updated, however small its buffer."""

    async def main() -> None:
        server = Buffered()
        ct, _ = connect_pair(Recorder(), server)
        payload = bytes(range(256)) * 3
        ct.write(payload)
        await until(lambda: bytes(server.data) == payload, timeout=5)

    asyncio.run(main())


def test_a_reader_that_stops_reading_pauses_the_writer() -> None:
    """Past the high-water mark the writer is paused; it resumes once the reader reads again."""

    async def main() -> None:
        client, server = Recorder(), Recorder()
        ct, st = connect_pair(client, server)
        ct.set_write_buffer_limits(high=100, low=10)
        st.pause_reading()
        ct.write(b"x" * 150)
        assert client.events == ["made", "pause"]
        await asyncio.sleep(0)
        assert server.data == b"" and ct.get_write_buffer_size() == 150
        st.resume_reading()
        await until(lambda: "resume" in client.events, timeout=5)
        assert server.data == b"x" * 150 and ct.get_write_buffer_size() == 0

    asyncio.run(main())


@pytest.mark.parametrize("keep_open", [False, True])
def test_close_delivers_the_data_then_eof(keep_open: bool) -> None:
    """close(): the peer reads what was written, then EOF; it closes too unless eof_received says not."""

    async def main() -> None:
        client, server = Recorder(), Recorder(keep_open_on_eof=keep_open)
        ct, st = connect_pair(client, server)
        ct.write(b"last words")
        ct.close()
        await until(lambda: "eof" in server.events, timeout=5)
        assert server.data == b"last words"
        await until(lambda: ("lost", None) in client.events, timeout=5)
        if keep_open:
            await asyncio.sleep(0)
            assert not st.is_closing() and ("lost", None) not in server.events
            st.close()
        await until(lambda: ("lost", None) in server.events, timeout=5)

    asyncio.run(main())


def test_abort_resets_the_peer_and_drops_unread_bytes() -> None:
    """abort(): the peer loses the connection with ConnectionResetError and never sees the unread bytes."""

    async def main() -> None:
        client, server = Recorder(), Recorder()
        ct, _ = connect_pair(client, server)
        ct.write(b"never read")
        ct.abort()
        await until(lambda: len(server.events) == 2 and len(client.events) == 2, timeout=5)
        assert server.events == ["made", ("lost", "ConnectionResetError")]
        assert client.events == ["made", ("lost", None)]
        assert server.data == b""

    asyncio.run(main())


def test_a_memory_server_that_is_not_serving_refuses_like_a_closed_port() -> None:
    """Dialing a MemoryServer before start or after stop is Unavailable (connection refused), as over TCP."""

    async def main() -> None:
        server = MemoryServer(Server(ServerConfig(dev=True)))
        await server.start()
        await server.stop()
        with pytest.raises(Unavailable, match="not accepting"):
            await open_session(server.url, TransportOptions(), dialer=server.dial)

    asyncio.run(main())
