"""Servers that are not HTTP/2 (garbage, HTTP/1.1, instant close) yield Unavailable, nothing foreign."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from conveyor_sdk._transport import TransportOptions, open_session
from conveyor_sdk.errors import Unavailable

from ._helpers import HELLO

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _with_server(handler: Handler, check: Callable[[str], Awaitable[None]]) -> None:
    writers: list[asyncio.StreamWriter] = []

    async def wrapped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await handler(reader, writer)

    server = await asyncio.start_server(wrapped, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await check(f"http://127.0.0.1:{port}")
    finally:
        server.close()
        for w in writers:
            w.close()
        await server.wait_closed()


async def _garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    # a SETTINGS frame on stream 1 (SETTINGS must use stream 0), then noise
    writer.write(b"\x00\x00\x06\x04\x00\x00\x00\x00\x01" + b"\x00\x03\x00\x00\x00\x64" + b"not http/2 at all")
    await writer.drain()
    await reader.read()


async def _http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(100)
    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    await writer.drain()
    await reader.read()  # keeps the connection open: the client must notice on its own


async def _close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


@pytest.mark.parametrize(
    ("handler", "match"),
    [
        (_garbage, "broke the HTTP/2 protocol|connection to the server was lost"),
        (_http1, "answered in HTTP/1.x"),
        (_close, "connection to the server was lost"),
    ],
    ids=["garbage", "http1", "close"],
)
def test_non_http2_server(handler: Handler, match: str) -> None:
    """recv() and send() raise Unavailable with a clear message against a non-HTTP/2 server."""

    async def check(url: str) -> None:
        stream = await open_session(url, TransportOptions())
        async with stream:
            with pytest.raises(Unavailable, match=match):
                await stream.send(HELLO)
                await asyncio.wait_for(stream.recv(), 10)
            with pytest.raises(Unavailable):
                await stream.send(HELLO)

    asyncio.run(_with_server(handler, check))
