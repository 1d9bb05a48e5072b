"""Hello validation (upstream order and messages) and the Welcome frame. Pure functions."""

from __future__ import annotations

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import InvalidArgument, ProtocolError
from conveyor_server_min._engine.clock import from_seconds
from conveyor_server_min._services import semver
from conveyor_server_min._services.convert import duration
from conveyor_server_min._services.validate import go_quote, valid_queue_name
from conveyor_server_min.service_api import EngineConfig

__all__ = ["check_hello", "welcome"]


def _check_versions(hello: pb.Hello, config: EngineConfig) -> None:
    sdk, floor = hello.sdk_version, config.min_sdk_version
    if semver.is_semver(sdk) and semver.is_semver(floor) and semver.compare(sdk, floor) < 0:
        raise InvalidArgument(
            f"worker SDK version {sdk} is older than the server's minimum {floor}; upgrade the worker SDK"
        )
    required, server = hello.min_server_version, config.server_version
    if semver.is_semver(required) and semver.is_semver(server) and semver.compare(server, required) < 0:
        raise InvalidArgument(
            f"server version {server} is older than the worker's required minimum {required}; "
            "upgrade the server"
        )


def check_hello(first: pb.WorkerMessage, config: EngineConfig) -> pb.Hello:
    """Return the Hello of a valid first frame; raise InvalidArgument/ProtocolError otherwise."""
    if first.WhichOneof("frame") != "hello":
        raise ProtocolError("protocol violation: first frame must be Hello")
    hello = first.hello
    _check_versions(hello, config)
    if hello.concurrency <= 0:
        raise ProtocolError(f"protocol violation: concurrency must be positive, got {hello.concurrency}")
    if not hello.queues:
        raise ProtocolError("protocol violation: Hello must declare at least one queue")
    for name in sorted(hello.queues):
        if not valid_queue_name(name):
            raise ProtocolError(f"protocol violation: invalid queue name {go_quote(name)}")
        weight = hello.queues[name]
        if weight <= 0:
            raise ProtocolError(
                f"protocol violation: queue {go_quote(name)} weight must be positive, got {weight}"
            )
    return hello


def welcome(session_id: str, config: EngineConfig) -> pb.ServerMessage:
    ttl_nanos = from_seconds(config.lease_ttl)
    msg = pb.ServerMessage()
    w = msg.welcome
    w.session_id = session_id
    w.lease_ttl.CopyFrom(duration(ttl_nanos))
    w.heartbeat_interval.CopyFrom(duration(ttl_nanos // 3))
    w.server_version = config.server_version
    w.min_sdk_version = config.min_sdk_version
    return msg
