"""Server error statuses (trailers, Trailers-Only, end-of-stream, HTTP) map to the right ConveyorError."""

from __future__ import annotations

import asyncio
import json

import pytest

from conveyor_sdk._transport import TransportOptions, open_session
from conveyor_sdk.errors import (
    Code,
    ConveyorError,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
)
from conveyor_sdk.testing import ScriptedPeer

from ._helpers import HELLO, WELCOME, opened

PROTOCOLS = ["grpc", "connect"]
CASES = [
    (Code.UNAUTHENTICATED, Unauthenticated),
    (Code.PERMISSION_DENIED, PermissionDenied),
    (Code.INVALID_ARGUMENT, InvalidArgument),
    (Code.NOT_FOUND, NotFound),
    (Code.UNAVAILABLE, Unavailable),
    (Code.INTERNAL, Internal),
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("code", "cls"), CASES)
def test_error_after_messages(protocol: str, code: Code, cls: type[ConveyorError]) -> None:
    """An error ending an established stream is raised by recv() after the queued messages."""

    async def main() -> None:
        async with ScriptedPeer(protocol=protocol) as peer:
            stream, sess = await opened(peer)
            async with stream:
                await sess.send(WELCOME)
                await sess.end(code, "protocol violation: 50% done, naïve")
                assert await stream.recv() == WELCOME
                with pytest.raises(cls) as info:
                    await stream.recv()
                assert info.value.code is code
                assert info.value.message == "protocol violation: 50% done, naïve"
                with pytest.raises(cls):  # the outcome is sticky
                    await stream.recv()

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rejected_at_open(protocol: str) -> None:
    """A rejection at open (gRPC Trailers-Only / Connect end-of-stream first) raises with decoded message."""

    async def main() -> None:
        async with ScriptedPeer(protocol=protocol) as peer:
            peer.reject_next(Code.INVALID_ARGUMENT, "first frame must be Hello % \u00e9")
            stream = await open_session(peer.url, TransportOptions(protocol=protocol))  # type: ignore[arg-type]
            async with stream:
                with pytest.raises(InvalidArgument, match="first frame must be Hello % \u00e9"):
                    await stream.recv()
                if protocol == "grpc":
                    assert stream.trailers["grpc-status"] == "3"
                    assert "%25" in stream.trailers["grpc-message"]

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_missing_token_is_unauthenticated(protocol: str) -> None:
    """A peer requiring a token rejects a tokenless session with Unauthenticated, and admits a good one."""

    async def main() -> None:
        async with ScriptedPeer(protocol=protocol, require_token="sekret") as peer:
            stream = await open_session(peer.url, TransportOptions(protocol=protocol))  # type: ignore[arg-type]
            async with stream:
                await stream.send(HELLO)
                with pytest.raises(Unauthenticated):
                    await stream.recv()
            stream, sess = await opened(peer, token="sekret")
            async with stream:
                assert sess.headers["authorization"] == "Bearer sekret"
            assert peer.sessions_opened == 2

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("status", "cls"), [(503, Unavailable), (404, Unimplemented), (401, Unauthenticated), (418, Unknown)]
)
def test_http_status_without_body(protocol: str, status: int, cls: type[ConveyorError]) -> None:
    """A non-200 HTTP answer maps through the HTTP-to-code table and records the status."""

    async def main() -> None:
        async with ScriptedPeer(protocol=protocol) as peer:
            peer.reject_next_http(status, b"nope", content_type="text/plain")
            stream = await open_session(peer.url, TransportOptions(protocol=protocol))  # type: ignore[arg-type]
            async with stream:
                with pytest.raises(cls) as info:
                    await stream.recv()
                assert info.value.details["http_status"] == status

    asyncio.run(main())


def test_connect_http_error_with_json_body() -> None:
    """A Connect JSON error body wins over the HTTP status mapping."""

    async def main() -> None:
        async with ScriptedPeer(protocol="connect") as peer:
            body = json.dumps({"code": "permission_denied", "message": "read-only"}).encode()
            peer.reject_next_http(400, body)
            stream = await open_session(peer.url, TransportOptions(protocol="connect"))
            async with stream:
                with pytest.raises(PermissionDenied, match="read-only"):
                    await stream.recv()

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_stream_end_without_status_is_internal(protocol: str) -> None:
    """END_STREAM without grpc-status / Connect end-of-stream message is an Internal error."""

    async def main() -> None:
        async with ScriptedPeer(protocol=protocol) as peer:
            stream, sess = await opened(peer)
            async with stream:
                await sess.send(WELCOME)
                await sess.send_raw(b"", framed=True, end_stream=True)
                assert await stream.recv() == WELCOME
                with pytest.raises(Internal, match="without"):
                    await stream.recv()

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_truncated_message_is_internal(protocol: str) -> None:
    """A stream ending in the middle of a length-prefixed message is an Internal error."""

    async def main() -> None:
        async with ScriptedPeer(protocol=protocol) as peer:
            stream, sess = await opened(peer)
            async with stream:
                await sess.send_raw(b"\x00\x00\x00\x00\x10abc", framed=True, end_stream=True)
                with pytest.raises(Internal, match="middle of a message"):
                    await stream.recv()

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_garbage_message_is_internal(protocol: str) -> None:
    """Bytes that are not a ServerMessage raise Internal, never a protobuf exception."""

    async def main() -> None:
        async with ScriptedPeer(protocol=protocol) as peer:
            stream, sess = await opened(peer)
            async with stream:
                await sess.send_raw(b"\xff\xff\xff\xff")
                with pytest.raises(Internal, match="not a valid ServerMessage"):
                    await stream.recv()

    asyncio.run(main())


def test_unexpected_content_type_is_unknown() -> None:
    """A 200 answer with a foreign content-type is reported as Unknown."""

    async def main() -> None:
        async with ScriptedPeer(protocol="grpc") as peer:
            peer.reject_next_http(200, b"<html>", content_type="text/html")
            stream = await open_session(peer.url, TransportOptions())
            async with stream:
                with pytest.raises(Unknown, match="content-type"):
                    await stream.recv()

    asyncio.run(main())


def test_connect_clean_end_returns_none() -> None:
    """A clean Connect end-of-stream ends recv() with None."""

    async def main() -> None:
        async with ScriptedPeer(protocol="connect") as peer:
            stream, sess = await opened(peer)
            async with stream:
                await sess.end()
                assert await stream.recv() is None
                assert stream.response_headers is not None
                assert stream.response_headers["content-type"] == "application/connect+proto"

    asyncio.run(main())
