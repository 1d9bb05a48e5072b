"""PING, GOAWAY, RST_STREAM, half-close and local close on a session stream."""

from __future__ import annotations

import asyncio

import pytest
from h2.errors import ErrorCodes

from conveyor_sdk._transport import TransportOptions, open_session
from conveyor_sdk.errors import (
    Canceled,
    ConveyorError,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    ResourceExhausted,
    Unavailable,
)
from conveyor_sdk.testing import ScriptedPeer

from ._helpers import HELLO, WELCOME, opened


def test_ping_is_answered() -> None:
    """A server PING gets its ACK while the application is not reading."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, sess = await opened(peer)
            async with stream:
                await sess.ping(timeout=5)
                await peer.ping(timeout=5)
                await sess.send(WELCOME)
                assert await stream.recv() == WELCOME

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_graceful_goaway_lets_stream_finish(protocol: str) -> None:
    """After a NO_ERROR GOAWAY covering our stream, remaining messages and the clean end still arrive."""

    async def main() -> None:
        async with ScriptedPeer(protocol=protocol) as peer:
            stream, sess = await opened(peer)
            async with stream:
                await peer.goaway()
                await sess.send(WELCOME)
                assert await stream.recv() == WELCOME
                assert stream.goaway_received
                await stream.send(HELLO)  # the request side stays usable until the stream ends
                assert await sess.recv() == HELLO
                await sess.end()
                assert await stream.recv() is None

    asyncio.run(main())


def test_goaway_with_error_is_unavailable() -> None:
    """A GOAWAY carrying an error code ends the stream with Unavailable naming the code."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, _sess = await opened(peer)
            async with stream:
                await peer.goaway(ErrorCodes.INTERNAL_ERROR, data=b"node shutting down")
                with pytest.raises(Unavailable, match=r"GOAWAY INTERNAL_ERROR\): node shutting down"):
                    await stream.recv()
                with pytest.raises(Unavailable):
                    await stream.send(HELLO)

    asyncio.run(main())


def test_goaway_excluding_our_stream_is_unavailable() -> None:
    """A GOAWAY whose last-stream-id is below ours means the stream was not processed: Unavailable."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, _sess = await opened(peer)
            async with stream:
                await peer.goaway(last_stream_id=0)
                with pytest.raises(Unavailable, match="GOAWAY NO_ERROR"):
                    await stream.recv()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (ErrorCodes.CANCEL, Unavailable),
        (ErrorCodes.REFUSED_STREAM, Unavailable),
        (ErrorCodes.INTERNAL_ERROR, Internal),
        (ErrorCodes.ENHANCE_YOUR_CALM, ResourceExhausted),
    ],
)
def test_rst_stream_maps_to_error(code: int, cls: type[ConveyorError]) -> None:
    """RST_STREAM from the server surfaces as the mapped error on recv() and send()."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, sess = await opened(peer)
            async with stream:
                await sess.send(WELCOME)
                await sess.reset(code)
                assert await stream.recv() == WELCOME
                with pytest.raises(cls, match="reset the session stream"):
                    await stream.recv()
                with pytest.raises(cls):
                    await stream.send(HELLO)

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_half_close(protocol: str) -> None:
    """close_send() delivers END_STREAM after queued messages; the server can still answer."""

    async def main() -> None:
        async with ScriptedPeer(protocol=protocol) as peer:
            stream, sess = await opened(peer)
            async with stream:
                await stream.send(HELLO)
                await stream.close_send()
                await stream.close_send()  # idempotent
                assert await sess.recv() == HELLO
                assert await sess.recv() is None
                assert sess.client_half_closed
                with pytest.raises(FailedPrecondition):
                    await stream.send(HELLO)
                await sess.send(WELCOME)
                await sess.end()
                assert await stream.recv() == WELCOME
                assert await stream.recv() is None
            assert sess.client_reset is None

    asyncio.run(main())


def test_aclose_cancels_open_stream() -> None:
    """aclose() resets an open stream with CANCEL, is idempotent, and later calls raise Canceled."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, sess = await opened(peer)
            reader = asyncio.create_task(stream.recv())
            await asyncio.sleep(0)
            await stream.aclose()
            await stream.aclose()
            with pytest.raises(Canceled):
                await reader
            with pytest.raises(Canceled):
                await stream.send(HELLO)
            await sess.wait_closed_by_client()
            assert sess.client_reset == ErrorCodes.CANCEL

    asyncio.run(main())


def test_recv_is_cancel_safe() -> None:
    """Cancelling a pending recv() (e.g. a timeout) loses no message."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, sess = await opened(peer)
            async with stream:
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(stream.recv(), 0.05)
                await sess.send(WELCOME)
                assert await asyncio.wait_for(stream.recv(), 5) == WELCOME

    asyncio.run(main())


def test_peer_drops_connection() -> None:
    """A connection closed without GOAWAY or trailers ends the stream with Unavailable."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, _sess = await opened(peer)
            async with stream:
                peer.connections[0].abort()
                with pytest.raises(Unavailable, match="connection to the server was lost"):
                    await stream.recv()

    asyncio.run(main())


def test_send_raw_reaches_peer_verbatim() -> None:
    """send_raw() sends unframed bytes as one message and framed bytes verbatim."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream, sess = await opened(peer)
            async with stream:
                await stream.send_raw(b"\x08\x01garbage")
                await stream.send_raw(b"\x00\x00\x00\x00\x03abc", framed=True)
                assert await sess.recv_raw() == b"\x08\x01garbage"
                assert await sess.recv_raw() == b"abc"

    asyncio.run(main())


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:1", "http://", "127.0.0.1:8080", "http://127.0.0.1:99999"])
def test_bad_url_is_invalid_argument(url: str) -> None:
    """A URL that is not http(s)://host[:port] raises InvalidArgument before any I/O."""

    async def main() -> None:
        with pytest.raises(InvalidArgument):
            await open_session(url, TransportOptions())

    asyncio.run(main())
