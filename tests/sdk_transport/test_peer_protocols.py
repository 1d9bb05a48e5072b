"""ScriptedPeer answers in the client's own protocol and codec (gRPC, Connect proto, Connect JSON)."""

from __future__ import annotations

import asyncio
import json

import h2.config
import h2.connection
import h2.events
import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._protocol.framing import FLAG_END_STREAM, FrameDecoder, encode_frame
from conveyor_sdk._transport import TransportOptions, open_session
from conveyor_sdk.errors import Code, ConveyorError, InvalidArgument, Unauthenticated
from conveyor_sdk.testing import ScriptedPeer

from ._helpers import HELLO, WELCOME

DISPATCH = pb.ServerMessage(dispatch=pb.Dispatch(task=tpb.TaskEnvelope(id="t-1", type="x")))
CONTENT = {"grpc": "application/grpc", "connect": "application/connect+proto"}


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_auto_peer_answers_in_the_clients_protocol(protocol: str) -> None:
    """One auto peer serves a gRPC and a Connect client, each answered with its own content-type."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream = await open_session(peer.url, TransportOptions(protocol=protocol))  # type: ignore[arg-type]
            async with stream:
                await stream.send(HELLO)
                sess = await peer.accept()
                assert (sess.protocol, sess.codec, sess.content_type) == (
                    protocol,
                    "proto",
                    CONTENT[protocol],
                )
                assert await sess.recv() == HELLO
                await sess.send(WELCOME)
                assert await stream.recv() == WELCOME
                assert stream.response_headers is not None
                assert stream.response_headers["content-type"] == CONTENT[protocol]
                await sess.end()
                assert await stream.recv() is None

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_error_end_after_messages_uses_the_clients_protocol(protocol: str) -> None:
    """An error end after Welcome is gRPC trailers for gRPC and an end-of-stream message for Connect."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream = await open_session(peer.url, TransportOptions(protocol=protocol))  # type: ignore[arg-type]
            async with stream:
                await stream.send(HELLO)
                sess = await peer.accept()
                await sess.send(WELCOME)
                await sess.end(Code.INVALID_ARGUMENT, "protocol violation: bad frame")
                assert await stream.recv() == WELCOME
                with pytest.raises(InvalidArgument, match="bad frame"):
                    await stream.recv()
                has_grpc_status = "grpc-status" in stream.trailers
                assert has_grpc_status is (protocol == "grpc")

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_rejection_before_welcome_uses_the_clients_protocol(protocol: str) -> None:
    """reject_next answers a stream at once with the error in the client's protocol."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            peer.reject_next(Code.UNAUTHENTICATED, "no token")
            stream = await open_session(peer.url, TransportOptions(protocol=protocol))  # type: ignore[arg-type]
            async with stream:
                await stream.send(HELLO)
                with pytest.raises(Unauthenticated, match="no token"):
                    await stream.recv()
            assert peer.streams[0].protocol == protocol

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_send_side_stays_open_after_the_client_half_closes(protocol: str) -> None:
    """After the client's half-close the peer can still send (a late Dispatch), then end the stream."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream = await open_session(peer.url, TransportOptions(protocol=protocol))  # type: ignore[arg-type]
            async with stream:
                await stream.send(HELLO)
                sess = await peer.accept()
                await sess.recv()
                await sess.send(WELCOME)
                await stream.close_send()
                await sess.wait_closed_by_client(timeout=5)
                assert await sess.recv() is None
                await sess.send(DISPATCH)
                await sess.end()
                assert await stream.recv() == WELCOME
                assert await stream.recv() == DISPATCH
                assert await stream.recv() is None

    asyncio.run(main())


async def _connect_json_client(url: str, body: bytes) -> tuple[dict[str, str], list[tuple[int, bytes]]]:
    """A bare HTTP/2 client speaking Connect streaming with JSON: one message, half-close, read all."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    headers = [
        (":method", "POST"), (":scheme", "http"), (":authority", f"{host}:{port}"),
        (":path", "/conveyor.v1.WorkerService/Session"), ("content-type", "application/connect+json"),
    ]  # fmt: skip
    conn.send_headers(1, headers)
    conn.send_data(1, encode_frame(body), end_stream=True)
    writer.write(conn.data_to_send())
    response: dict[str, str] = {}
    frames = FrameDecoder()
    got: list[tuple[int, bytes]] = []
    done = False
    while not done:
        data = await asyncio.wait_for(reader.read(65536), 5)
        assert data, "peer closed the connection"
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                response = {str(k): str(v) for k, v in event.headers or ()}
            elif isinstance(event, h2.events.DataReceived):
                got += [(f.flags, f.data) for f in frames.feed(event.data or b"")]
                conn.acknowledge_received_data(event.flow_controlled_length or 0, 1)
            elif isinstance(event, h2.events.StreamEnded):
                done = True
        writer.write(conn.data_to_send())
    writer.close()
    return response, got


def test_connect_json_client_is_answered_in_json_with_an_error_end_message() -> None:
    """A Connect+JSON Hello is parsed; Welcome goes back as proto3 JSON; the error rides the end message."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            hello = json.dumps({"hello": {"queues": {"q": 1}, "concurrency": 2, "sdkVersion": "js/1"}})
            client = asyncio.ensure_future(_connect_json_client(peer.url, hello.encode()))
            sess = await peer.accept()
            assert (sess.protocol, sess.codec) == ("connect", "json")
            got = await sess.recv()
            assert got is not None and got.hello.concurrency == 2 and dict(got.hello.queues) == {"q": 1}
            welcome = pb.Welcome(session_id="s-1")
            welcome.heartbeat_interval.FromMilliseconds(300)
            await sess.send(pb.ServerMessage(welcome=welcome))
            await sess.end(Code.UNAVAILABLE, "going away")
            headers, frames = await client
        assert headers[":status"] == "200" and headers["content-type"] == "application/connect+json"
        (flags, first), (end_flags, end) = frames
        assert flags == 0 and json.loads(first) == {
            "welcome": {"sessionId": "s-1", "heartbeatInterval": "0.300s"}
        }
        assert end_flags == FLAG_END_STREAM
        assert json.loads(end) == {"error": {"code": "unavailable", "message": "going away"}}

    asyncio.run(main())


def test_forced_protocol_still_answers_in_that_protocol() -> None:
    """ScriptedPeer('grpc') answers a Connect client in gRPC (for tests of a server in the wrong protocol)."""

    async def main() -> None:
        async with ScriptedPeer("grpc") as peer:
            stream = await open_session(peer.url, TransportOptions(protocol="connect"))
            async with stream:
                await stream.send(HELLO)
                sess = await peer.accept()
                assert sess.protocol == "grpc" and sess.content_type == CONTENT["connect"]
                await sess.send(WELCOME)
                with pytest.raises(ConveyorError, match=r"content-type|application/grpc"):
                    await stream.recv()

    asyncio.run(main())
