"""Reads into one kept buffer on asyncio's own loop (BufferedReads); uvloop keeps plain protocols."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from conveyor_sdk._client.h2conn import BufferedH2Conn, H2Conn
from conveyor_sdk._transport import TransportOptions, open_session
from conveyor_sdk._transport.reads import READ_SIZE, BufferedReads, wants_buffered
from conveyor_sdk._transport.session import _BufferedSocketProtocol, _SocketProtocol
from conveyor_sdk.client import Client


class _Collector(BufferedReads, asyncio.Protocol):
    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.buffers: set[int] = set()
        self.eof = asyncio.get_running_loop().create_future()

    def get_buffer(self, sizehint: int) -> memoryview:
        view = super().get_buffer(sizehint)
        self.buffers.add(id(view))
        return view

    def data_received(self, data: bytes) -> None:
        assert type(data) is bytes  # a copy, not a view of the buffer that the next read overwrites
        self.chunks.append(data)

    def eof_received(self) -> bool:
        self.eof.set_result(None)
        return False


def test_reads_land_in_one_kept_buffer_and_arrive_whole_and_in_order() -> None:
    """Over real TCP on asyncio's loop: bytes larger than the buffer arrive whole, in order, each
    read handed over as its own bytes; every read used the same buffer; EOF is reported."""
    big = bytes(range(256)) * (3 * READ_SIZE // 256 + 7)
    parts = [b"first", big, b"last"]

    async def main() -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for part in parts:
                writer.write(part)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        transport, proto = await loop.create_connection(_Collector, "127.0.0.1", port)
        await asyncio.wait_for(proto.eof, 10)
        transport.close()
        server.close()
        await server.wait_closed()
        assert b"".join(proto.chunks) == b"".join(parts)
        assert len(proto.chunks) >= 4  # the big part took several reads of at most READ_SIZE
        assert max(len(c) for c in proto.chunks) <= READ_SIZE
        assert len(proto.buffers) == 1

    asyncio.run(main())


def test_only_asyncios_own_loops_get_the_buffered_protocol() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert wants_buffered(loop)
    finally:
        loop.close()
    uv = uvloop.new_event_loop()
    try:
        assert not wants_buffered(uv)
    finally:
        uv.close()


def _on(loop_kind: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    if loop_kind == "uvloop":
        uvloop.run(main())
    else:
        asyncio.run(main())


@pytest.mark.parametrize(
    ("loop_kind", "session_protocol", "client_protocol"),
    [("asyncio", _BufferedSocketProtocol, BufferedH2Conn), ("uvloop", _SocketProtocol, H2Conn)],
)
def test_the_worker_session_and_the_client_pick_their_protocol_by_loop(
    server_url: str, loop_kind: str, session_protocol: type, client_protocol: type
) -> None:
    """A session and an enqueue against the reference server, on each loop: the protocol in use is
    the buffered one on asyncio's loop only, and both work."""

    async def main() -> None:
        stream = await open_session(server_url, TransportOptions())
        try:
            assert stream._transport is not None
            assert type(stream._transport.get_protocol()) is session_protocol
        finally:
            await stream.aclose()
        async with Client(server_url) as client:
            info = await client.enqueue("t", b"x", queue="reads")
            assert info.queue == "reads"
            assert client._h2 is not None
            assert type(client._h2._conn) is client_protocol

    _on(loop_kind, main)
