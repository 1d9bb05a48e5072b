"""What the call layer remembers between calls (admitted routes, the last CallContext, timeout values)
never changes an answer: credentials, content types and headers are judged on every call."""

from __future__ import annotations

import asyncio

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import InvalidArgument
from conveyor_server_min._http.wire import Wire, parse_timeout

from .fakes import ENQUEUE, FakeServices, ThreadServer
from .h2client import H2Client

BODY = pb.EnqueueRequest(type="t").SerializeToString()


async def _unary(client: H2Client, path: str, content_type: str, extra: dict[str, str]) -> str:
    sid = await client.open(path, content_type, extra=extra)
    await client.send(sid, BODY, end=True)
    st = await client.wait(sid)
    return st.headers[":status"]


def test_credentials_are_checked_on_every_call_of_an_admitted_route(auth_server: ThreadServer) -> None:
    """On one connection, the same route alternates between accepted and refused with the token."""

    async def main() -> list[str]:
        client = await H2Client().connect("127.0.0.1", auth_server.port)
        try:
            tokens = ["Bearer s3cret", "", "Bearer nope", "Bearer other", "", "Bearer s3cret"]
            return [
                await _unary(client, ENQUEUE, "application/proto", {"authorization": t} if t else {})
                for t in tokens
            ]
        finally:
            await client.close()

    assert asyncio.run(main()) == ["200", "401", "401", "200", "401", "200"]


def test_a_refused_route_is_refused_again(fake_server: ThreadServer) -> None:
    """415 for a streaming content type on a unary method, and unimplemented for an unknown
    method, each time, also after the same method was served with the right content type."""

    async def main() -> list[tuple[str, str | None]]:
        client = await H2Client().connect("127.0.0.1", fake_server.port)
        out = []
        try:
            for path, content_type in [
                (ENQUEUE, "application/connect+proto"),
                (ENQUEUE, "application/proto"),
                (ENQUEUE, "application/connect+proto"),
                ("/conveyor.v1.TaskService/Nope", "application/grpc"),
                ("/conveyor.v1.TaskService/Nope", "application/grpc"),
            ]:
                sid = await client.open(path, content_type)
                await client.send(sid, BODY if content_type == "application/proto" else b"", end=True)
                st = await client.wait(sid)
                out.append((st.headers[":status"], st.headers.get("grpc-status")))
        finally:
            await client.close()
        return out

    assert asyncio.run(main()) == [("415", None), ("200", None), ("415", None), ("200", "12"), ("200", "12")]


def test_each_call_sees_its_own_headers() -> None:
    """Handlers see every call's headers, whether the header block repeats the last one or not."""
    services = FakeServices()
    with ThreadServer(services) as server:

        async def main() -> None:
            client = await H2Client().connect("127.0.0.1", server.port)
            try:
                for tag in ("a", "a", "b", "a"):
                    assert await _unary(client, ENQUEUE, "application/proto", {"x-tag": tag}) == "200"
            finally:
                await client.close()

        asyncio.run(main())
    assert [seen["x-tag"] for seen in services.headers_seen] == ["a", "a", "b", "a"]


def test_timeout_values_are_remembered_per_header() -> None:
    """A value valid for connect-timeout-ms stays invalid as a grpc-timeout, and a malformed one
    fails every time."""
    assert parse_timeout(Wire.CONNECT_UNARY, {"connect-timeout-ms": "100"}) == 0.1
    assert parse_timeout(Wire.CONNECT_UNARY, {"connect-timeout-ms": "100"}) == 0.1
    for _ in range(2):
        with pytest.raises(InvalidArgument, match="malformed grpc-timeout"):
            parse_timeout(Wire.GRPC, {"grpc-timeout": "100"})
        with pytest.raises(InvalidArgument, match="malformed connect-timeout-ms"):
            parse_timeout(Wire.CONNECT_STREAM, {"connect-timeout-ms": "1S"})
    assert parse_timeout(Wire.GRPC_WEB, {"grpc-timeout": "100m"}) == pytest.approx(0.1)
    assert parse_timeout(Wire.GRPC, {"grpc-timeout": "100m"}) == pytest.approx(0.1)
