"""Server frames the worker tests script (one builder, so that each test says only what differs)."""

from __future__ import annotations

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb


def welcome(session_id: str = "S1", ttl: float = 3.0, interval: float | None = 1.0) -> pb.ServerMessage:
    """A Welcome: ``ttl`` (the lease) and ``interval`` (heartbeats; None: not sent) in seconds."""
    msg = pb.ServerMessage()
    msg.welcome.session_id = session_id
    msg.welcome.lease_ttl.FromNanoseconds(round(ttl * 1e9))
    if interval is not None:
        msg.welcome.heartbeat_interval.FromNanoseconds(round(interval * 1e9))
    return msg
