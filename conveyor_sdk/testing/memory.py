"""The reference server in the test's own event loop, reached through in-memory connections.

For SDK tests that need a real server as a peer but are not about sockets: no subprocess to
start, no port, and the engine can run on a virtual clock. The worker session and the producer
client connect with their ordinary code; only the dialer differs::

    async with MemoryServer(Server(ServerConfig(dev=True))) as server:
        stream = await open_session(server.url, options, dialer=server.dial)
        async with server.client() as client:     # Client(server.url, dialer=server.dial)
            await client.enqueue("email:welcome", {"user_id": 42})
        worker = server.worker(concurrency=4)       # Worker(server.url, dialer=server.dial, ...)
        await worker.run(registry)                  # until worker.stop()

The caller builds the ``conveyor_server_min.server.Server`` (with the config and services it
wants); this module only needs what :class:`Servable` names, so the SDK's type check does not
extend into the server package.

Each connection is a :func:`~conveyor_sdk._h2kernel.memory.connect_pair` between the client's
protocol and the server's connection handler (``Server.accept``), so both run exactly the HTTP/2
kernel code they run over TCP. There is no TLS; a test of TLS, of the listener or of anything
the operating system does to a connection still needs a real server (``ServerProcess``).
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar, Unpack

from conveyor_sdk._h2kernel.memory import MemoryTransport, connect_pair
from conveyor_sdk._transport._connect import Target
from conveyor_sdk.client import Client, ClientOptions
from conveyor_sdk.errors import FailedPrecondition, InvalidArgument
from conveyor_sdk.worker import Worker

__all__ = ["MemoryServer", "Servable"]

_P = TypeVar("_P", bound=asyncio.BaseProtocol)


class Servable(Protocol):
    """What MemoryServer uses of the reference server's ``Server``."""

    async def start(self, *, listen: bool = ...) -> str: ...

    async def stop(self) -> None: ...

    def accept(self) -> asyncio.Protocol: ...


class MemoryServer:
    """``server`` (a reference ``Server``, not started) started bound to no port (``async with``)."""

    def __init__(self, server: Servable) -> None:
        self.server = server
        self.url = ""
        self.transports: list[MemoryTransport] = []  # the client ends, oldest first

    def __repr__(self) -> str:
        return f"<MemoryServer {self.server!r} connections={self.connections}>"

    @property
    def connections(self) -> int:
        """Connections dialed so far."""
        return len(self.transports)

    def client(self, **options: Unpack[ClientOptions]) -> Client:
        """An async :class:`~conveyor_sdk.client.Client` whose every call (task calls, ``admin``)
        reaches this server over in-memory connections; close it (``async with``) before stopping."""
        if not self.url:
            raise FailedPrecondition("start the MemoryServer (async with) before making a client on it")
        return Client(self.url, dialer=self.dial, **options)

    def worker(self, **options: Any) -> Worker:
        """A :class:`~conveyor_sdk.worker.Worker` (``options``: its keyword arguments) whose
        sessions and heal probes reach this server over in-memory connections; stop it before
        stopping the server."""
        if not self.url:
            raise FailedPrecondition("start the MemoryServer (async with) before making a worker on it")
        return Worker(self.url, dialer=self.dial, **options)

    async def start(self) -> str:
        """Start the server's services; returns its URL (which names no real host)."""
        self.url = await self.server.start(listen=False)
        return self.url

    async def stop(self) -> None:
        """Stop as the real server stops (GOAWAY, sessions ended, connections closed)."""
        await self.server.stop()

    async def dial(
        self,
        factory: Callable[[], _P],
        target: Target,
        *,
        tls: object | None,
        server_hostname: str | None,
    ) -> tuple[asyncio.Transport, _P]:
        """A :class:`~conveyor_sdk._transport._connect.Dialer`: a new in-memory connection."""
        if tls is not None:
            raise InvalidArgument("an in-memory connection has no TLS; use an http:// URL")
        try:
            server_side = self.server.accept()
        except RuntimeError:  # not started, or stopping: refused, as a closed port refuses
            refused = "the in-memory server is not accepting"
            raise ConnectionRefusedError(errno.ECONNREFUSED, refused) from None
        protocol = factory()
        client_side, _ = connect_pair(protocol, server_side, name=target.host)
        self.transports.append(client_side)
        return client_side, protocol

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
