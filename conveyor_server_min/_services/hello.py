"""Hello validation (upstream order and messages) and the Welcome frame. Pure functions.

After the upstream checks on concurrency and an empty queue map come this server's bounds: at most
``MAX_HELLO_QUEUES`` queues (10,000) and ``MAX_HELLO_BATCH_TYPES`` batch types, names of at most 255
bytes, labels as for task metadata. Each is ``invalid_argument`` (``protocol violation: ...``).
"""

from __future__ import annotations

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import InvalidArgument, ProtocolError
from conveyor_server_min._engine.clock import from_seconds
from conveyor_server_min._services import semver
from conveyor_server_min._services.bounds import (
    MAX_HELLO_BATCH_TYPES,
    MAX_HELLO_QUEUES,
    MAX_NAME,
    check_map,
    check_size,
    utf8_len,
)
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


def _check_bounds(hello: pb.Hello) -> None:
    """This server's size limits on a Hello (see :mod:`.bounds`); upstream has none."""
    count = len(hello.queues)
    if count > MAX_HELLO_QUEUES:
        raise ProtocolError(
            f"protocol violation: Hello declares {count} queues, the maximum is {MAX_HELLO_QUEUES}"
        )
    if len(hello.batch_types) > MAX_HELLO_BATCH_TYPES:
        raise ProtocolError(
            f"protocol violation: Hello declares {len(hello.batch_types)} batch_types, "
            f"the maximum is {MAX_HELLO_BATCH_TYPES}"
        )
    try:
        for name in hello.queues:
            check_size("queue name", name, MAX_NAME)
        for task_type in hello.batch_types:
            check_size("batch type", task_type, MAX_NAME)
        check_map("labels", hello.labels)
    except InvalidArgument as exc:
        raise ProtocolError(f"protocol violation: {exc.message}") from None


def check_hello(first: pb.WorkerMessage, config: EngineConfig) -> pb.Hello:
    """Return the Hello of a valid first frame; raise InvalidArgument/ProtocolError otherwise."""
    if first.WhichOneof("frame") != "hello":
        raise ProtocolError("protocol violation: first frame must be Hello")
    hello = first.hello
    for field in ("sdk_version", "min_server_version"):  # before the gates, which may echo them
        if utf8_len(getattr(hello, field)) > MAX_NAME:
            raise ProtocolError(f"protocol violation: {field} is longer than {MAX_NAME} bytes")
    _check_versions(hello, config)
    if hello.concurrency <= 0:
        raise ProtocolError(f"protocol violation: concurrency must be positive, got {hello.concurrency}")
    if not hello.queues:
        raise ProtocolError("protocol violation: Hello must declare at least one queue")
    _check_bounds(hello)
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
