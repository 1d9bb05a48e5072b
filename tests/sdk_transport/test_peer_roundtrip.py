"""Open gRPC and Connect session streams against ScriptedPeer: headers, Hello/Welcome, status mapping."""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events
import pytest
from hpack import NeverIndexedHeaderTuple

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._transport import SessionCore, TransportOptions, open_session
from conveyor_sdk._transport._connect import parse_target, request_headers
from conveyor_sdk.errors import Unavailable
from conveyor_sdk.testing import ScriptedPeer

HELLO = pb.WorkerMessage(hello=pb.Hello(concurrency=2, queues={"default": 1}, sdk_version="test"))


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_hello_welcome_roundtrip(protocol: str) -> None:
    """A Hello reaches the peer with the right headers and a Welcome comes back, then a clean end."""

    async def main() -> None:
        async with ScriptedPeer(protocol=protocol) as peer:
            stream = await open_session(peer.url, TransportOptions(protocol=protocol, token="tok"))
            async with stream:
                await stream.send(HELLO)
                sess = await peer.accept()
                assert sess.headers[":method"] == "POST"
                assert sess.headers[":path"] == "/conveyor.v1.WorkerService/Session"
                assert sess.headers["authorization"] == "Bearer tok"
                assert sess.headers["user-agent"].startswith("conveyor-py/")
                got = await sess.recv()
                assert got == HELLO
                await sess.send(pb.ServerMessage(welcome=pb.Welcome(session_id="s-1")))
                welcome = await stream.recv()
                assert welcome is not None and welcome.welcome.session_id == "s-1"
                await sess.end()
                assert await stream.recv() is None

    asyncio.run(main())


def test_connection_refused_is_unavailable() -> None:
    """Connecting to a closed port raises Unavailable naming the address."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            url = peer.url
        with pytest.raises(Unavailable, match="cannot connect"):
            await open_session(url, TransportOptions())

    asyncio.run(main())


def test_token_is_never_indexed() -> None:
    """The authorization header is sent as an HPACK never-indexed field (kept out of compression tables)."""
    opts = TransportOptions(token="sekret")
    core = SessionCore("grpc")
    core.start(request_headers(parse_target("http://h:1"), "/p", opts))
    srv = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    srv.initiate_connection()
    events = srv.receive_data(core.data_to_send())
    (request,) = [e for e in events if isinstance(e, h2.events.RequestReceived)]
    auth = [h for h in request.headers or () if h[0] == "authorization"]
    assert auth == [("authorization", "Bearer sekret")]
    assert isinstance(auth[0], NeverIndexedHeaderTuple)
