"""Shared bits for the transport tests."""

from __future__ import annotations

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._transport import SessionStream, TransportOptions, open_session
from conveyor_sdk.testing import PeerSession, ScriptedPeer

HELLO = pb.WorkerMessage(hello=pb.Hello(concurrency=2, queues={"default": 1}, sdk_version="test"))
WELCOME = pb.ServerMessage(welcome=pb.Welcome(session_id="s-1"))


async def opened(peer: ScriptedPeer, **options: object) -> tuple[SessionStream, PeerSession]:
    """Open a session to ``peer``, send Hello, and return both ends (Hello already read by the peer)."""
    opts = TransportOptions(protocol=peer.protocol, **options)  # type: ignore[arg-type]
    stream = await open_session(peer.url, opts)
    await stream.send(HELLO)
    sess = await peer.accept()
    assert await sess.recv() == HELLO
    return stream, sess
