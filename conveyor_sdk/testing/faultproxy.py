"""A TCP fault proxy on loopback: put it between a worker and a server, then break the link.

:class:`FaultProxy` (asyncio) listens on ``host:0`` and forwards each accepted connection to
``target``. At runtime it can:

* ``blackhole(direction, mode)`` - bytes stop arriving while both sockets stay open, as over
  a dead NAT entry, a partitioned node or a frozen peer. ``direction`` is ``"both"``,
  ``"up"`` (client to target only) or ``"down"`` (target to client only). ``mode="drop"``
  reads and discards the bytes; such a connection's byte stream has a hole, which a real TCP
  connection never resumes with, so :meth:`heal` resets it. ``mode="stall"`` stops reading,
  so the sender's socket buffers fill and its writes block, as over a partitioned TCP path
  whose retransmissions deliver everything once it heals.
* ``latency(seconds, direction)`` - each chunk is forwarded that long after it was read
  (pipelined: throughput is not capped).
* ``reset()`` - abort every open connection with a TCP RST, both sides.
* ``refuse()`` - close the listener, so a connect fails with ECONNREFUSED; :meth:`heal`
  listens again on the same port.
* ``heal()`` - undo all of the above.

Connections opened during a blackhole are blackholed too. :class:`SyncFaultProxy` runs one
in a thread of its own for synchronous tests and benchmarks. Standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import struct
import threading
import time
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Literal, TypeVar

__all__ = ["Direction", "FaultProxy", "ProxyStats", "SyncFaultProxy"]

Direction = Literal["both", "up", "down"]
Mode = Literal["drop", "stall"]
_CHUNK = 65536
_QUEUE = 64  # chunks in flight per direction: bounded, so a slow reader pushes back on the sender
T = TypeVar("T")


@dataclasses.dataclass
class ProxyStats:
    """Counters since the proxy started (``up``: client to target, ``down``: target to client)."""

    accepted: int = 0
    active: int = 0
    resets: int = 0
    target_failures: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    dropped_up: int = 0
    dropped_down: int = 0


class _Gate:
    """Fault state of one direction, shared by every connection."""

    def __init__(self) -> None:
        self.drop = False
        self.latency = 0.0
        self.open = asyncio.Event()
        self.open.set()


class _Conn:
    """One proxied connection: two pumps (read, then a delayed writer) per direction."""

    def __init__(self, proxy: FaultProxy, client: asyncio.StreamWriter, target: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.writers = (client, target)
        self.holed = False  # bytes were dropped: the streams cannot be resumed
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, client_r: asyncio.StreamReader, target_r: asyncio.StreamReader) -> None:
        client_w, target_w = self.writers
        for name, reader, writer in (("up", client_r, target_w), ("down", target_r, client_w)):
            queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(_QUEUE)
            self.tasks.append(asyncio.create_task(self._read(name, reader, queue)))
            self.tasks.append(asyncio.create_task(self._write(writer, queue)))

    async def _read(
        self, name: str, reader: asyncio.StreamReader, queue: asyncio.Queue[tuple[float, bytes]]
    ) -> None:
        gate = self.proxy._gates[name]
        stats = self.proxy.stats
        while True:
            await gate.open.wait()  # stall: stop reading, the sender's buffers fill
            data = await reader.read(_CHUNK)
            await gate.open.wait()  # a chunk read as the stall began is held, not sent
            if not data:
                await queue.put((0.0, b""))
                return
            if gate.drop:
                self.holed = True
                setattr(stats, f"dropped_{name}", getattr(stats, f"dropped_{name}") + len(data))
                continue
            setattr(stats, f"bytes_{name}", getattr(stats, f"bytes_{name}") + len(data))
            await queue.put((time.monotonic() + gate.latency, data))

    async def _write(self, writer: asyncio.StreamWriter, queue: asyncio.Queue[tuple[float, bytes]]) -> None:
        while True:
            due, data = await queue.get()
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()  # half-close passes through
                return
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()

    async def run(self) -> None:
        """Pump until both directions ended or one failed, then close both sockets."""
        failed = False
        try:
            done, _ = await asyncio.wait(self.tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = any(not t.cancelled() and t.exception() is not None for t in done)
        finally:
            self.close(rst=failed)  # a reset on one side reaches the other as a reset

    def close(self, rst: bool = False) -> None:
        for task in self.tasks:
            task.cancel()
        for writer in self.writers:
            if rst:
                _abort(writer)
            else:
                writer.close()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a RST (SO_LINGER 0), not a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Forward ``host:port`` (port 0: a free one) to ``target`` (``"host:port"``), with faults.

    Use as ``async with FaultProxy("127.0.0.1:8080") as proxy:``; :attr:`url` is the address
    to give the client. Every fault method applies at once, to open and to new connections.
    """

    def __init__(self, target: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        target_host, _, target_port = target.removeprefix("http://").rstrip("/").rpartition(":")
        if not target_host or not target_port.isdigit():
            raise ValueError(f"target must be host:port, not {target!r}")
        self.target = (target_host, int(target_port))
        self.host = host
        self.port = port
        self.stats = ProxyStats()
        self._gates: dict[str, _Gate] = {}
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        """``host:port`` the proxy listens on."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """``http://host:port`` the proxy listens on."""
        return f"http://{self.address}"

    @property
    def refusing(self) -> bool:
        return self._server is None

    async def start(self) -> FaultProxy:
        self._gates = {"up": _Gate(), "down": _Gate()}
        await self._listen()
        return self

    async def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # re-listen on our port after refuse()
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._accept, sock=sock)

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        try:
            target_r, target_w = await asyncio.open_connection(*self.target)
        except OSError:
            self.stats.target_failures += 1
            _abort(client_w)  # as if the target itself refused: the client sees a reset
            return
        for writer in (client_w, target_w):
            with contextlib.suppress(OSError):
                writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(self, client_w, target_w)
        conn.start(client_r, target_r)
        self._conns.add(conn)
        self.stats.active += 1
        try:
            await conn.run()
        finally:
            self._conns.discard(conn)
            self.stats.active -= 1

    def _directions(self, direction: Direction) -> list[_Gate]:
        if direction not in ("both", "up", "down"):
            raise ValueError(f"direction must be 'both', 'up' or 'down', not {direction!r}")
        return [self._gates[d] for d in (("up", "down") if direction == "both" else (direction,))]

    # -- faults -------------------------------------------------------------------------------
    def blackhole(self, direction: Direction = "both", *, mode: Mode = "drop") -> None:
        """Stop delivering bytes in ``direction``; sockets stay open (see the module doc)."""
        if mode not in ("drop", "stall"):
            raise ValueError(f"mode must be 'drop' or 'stall', not {mode!r}")
        for gate in self._directions(direction):
            if mode == "drop":
                gate.drop = True
            else:
                gate.open.clear()

    def latency(self, seconds: float, direction: Direction = "both") -> None:
        """Forward each chunk ``seconds`` after it was read (0 removes the delay)."""
        if seconds < 0:
            raise ValueError(f"latency must be >= 0, got {seconds}")
        for gate in self._directions(direction):
            gate.latency = seconds

    def reset(self) -> int:
        """Abort every open connection with a RST on both sides; returns how many."""
        conns = list(self._conns)
        for conn in conns:
            conn.close(rst=True)
        self.stats.resets += len(conns)
        return len(conns)

    def refuse(self) -> None:
        """Stop listening: new connects fail with ECONNREFUSED until :meth:`heal`."""
        if self._server is not None:
            self._server.close()  # open connections stay; only the listener goes
            self._server = None

    async def heal(self) -> None:
        """End every fault: bytes flow, no latency, listening again; holed connections are reset."""
        for gate in self._gates.values():
            gate.drop = False
            gate.latency = 0.0
            gate.open.set()
        for conn in [c for c in self._conns if c.holed]:
            conn.close(rst=True)
            self.stats.resets += 1
        if self._server is None:
            await self._listen()

    async def close(self) -> None:
        """Stop listening and close every connection."""
        self.refuse()
        for conn in list(self._conns):
            conn.close()
        self._conns.clear()

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class SyncFaultProxy:
    """A :class:`FaultProxy` on an event loop in a daemon thread, for synchronous code.

    Each method runs on that loop and returns once it applied. ``with SyncFaultProxy(t) as p:``.
    """

    def __init__(self, target: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.proxy = FaultProxy(target, host=host, port=port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _sync(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def address(self) -> str:
        return self.proxy.address

    @property
    def stats(self) -> ProxyStats:
        return dataclasses.replace(self.proxy.stats)

    def start(self) -> SyncFaultProxy:
        self._thread.start()
        self._call(self.proxy.start())
        return self

    def blackhole(self, direction: Direction = "both", *, mode: Mode = "drop") -> None:
        self._call(self._sync(self.proxy.blackhole, direction, mode=mode))

    def latency(self, seconds: float, direction: Direction = "both") -> None:
        self._call(self._sync(self.proxy.latency, seconds, direction))

    def reset(self) -> int:
        return int(self._call(self._sync(self.proxy.reset)))

    def refuse(self) -> None:
        self._call(self._sync(self.proxy.refuse))

    def heal(self) -> None:
        self._call(self.proxy.heal())

    def close(self) -> None:
        if self._thread.is_alive():
            self._call(self.proxy.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> SyncFaultProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
