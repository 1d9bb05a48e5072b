"""The seam between the server's HTTP layer (``_http``) and its services (``_services``).

The HTTP layer owns sockets, HTTP/1.1 + HTTP/2 + TLS, gRPC and Connect framing,
content types, auth and status mapping. It decodes request bytes into the
``request_type`` message and calls the handler; it encodes the response. A
handler signals failure by raising :class:`conveyor_sdk.errors.ConveyorError`;
any other exception becomes ``internal`` (logged) and never takes down another
call or session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from google.protobuf.message import Message

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

__all__ = [
    "CallContext",
    "EngineConfig",
    "ServerStreamMethod",
    "ServiceSet",
    "SessionHandler",
    "UnaryMethod",
]


@dataclass(frozen=True, slots=True)
class CallContext:
    """What a handler may know about its caller."""

    peer: str
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class UnaryMethod:
    """A unary RPC: ``path`` is ``/conveyor.v1.<Service>/<Method>``.

    ``handler`` returns the response, or an awaitable of it: a handler that never waits may be a
    plain function, and the HTTP layer then serves a whole Connect request without a coroutine.
    """

    path: str
    request_type: type[Message]
    response_type: type[Message]
    handler: Callable[[Message, CallContext], Awaitable[Message] | Message]


@dataclass(frozen=True, slots=True)
class ServerStreamMethod:
    """A server-streaming RPC (WatchEvents)."""

    path: str
    request_type: type[Message]
    response_type: type[Message]
    handler: Callable[[Message, CallContext], AsyncIterator[Message]]


class SessionHandler(Protocol):
    """WorkerService.Session: return normally for a clean end (OK); raise ConveyorError otherwise.

    ``recv`` yields decoded WorkerMessages and ends when the worker half-closes.
    ``send`` applies HTTP/2 flow control (it may wait); it raises ConveyorError
    when the stream is gone. ``send_nowait(msg, urgent)``, when given, queues a message
    at once if the stream has room and returns False otherwise (then ``send`` must be
    used); ``urgent`` also writes it to the socket in this turn. The handler uses it so
    a Dispatch leaves in the turn that produced it. The handler runs as
    one task per stream; when the transport cancels it (RST_STREAM, connection loss) it must release the
    session's leased tasks exactly as for a clean close.
    """

    async def __call__(
        self,
        ctx: CallContext,
        recv: AsyncIterator[pb.WorkerMessage],
        send: Callable[[pb.ServerMessage], Awaitable[None]],
        *,
        send_nowait: Callable[[pb.ServerMessage, bool], bool] | None = None,
    ) -> None: ...


class ServiceSet(Protocol):
    """Everything the HTTP layer serves, plus lifecycle."""

    @property
    def unary(self) -> Mapping[str, UnaryMethod]:
        """Unary methods by wire path."""

    @property
    def server_streams(self) -> Mapping[str, ServerStreamMethod]:
        """Server-streaming methods by wire path."""

    @property
    def session(self) -> SessionHandler:
        """The WorkerService.Session handler."""

    async def start(self) -> None:
        """Start background loops (promoter, reaper, group sweeper)."""

    async def stop(self) -> None:
        """End every session cleanly (leases released), stop loops. Idempotent."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Engine settings; durations in seconds. Defaults match upstream conveyord."""

    lease_ttl: float = 60.0
    reap_interval: float = 15.0
    promote_interval: float = 1.0
    group_max_size: int = 100
    group_max_delay: float = 60.0
    group_grace_period: float = 10.0
    group_sweep_interval: float = 1.0
    default_max_retry: int = 25
    retry_backoff_strategy: str = "exponential"
    retry_backoff_base: float = 2.0
    retry_backoff_cap: float = 900.0
    lease_batch_max: int = 100
    server_version: str = "v0.1.0"
    min_sdk_version: str = "v0.0.0-0"
    events_enabled: bool = True
    # A session holding leases that sends nothing for this many heartbeat intervals is closed and
    # its tasks released (docs/server-engine.md, "Silent sessions"); 0 turns the rule off.
    silent_session_intervals: float = 3.0
    extras: Mapping[str, str] = field(default_factory=dict)
