"""An in-memory connection pair: two asyncio transports joined back to back, with no socket.

The tests that need a peer but are not about sockets (the worker session or the producer client
against the reference server's connection handler) connect through :func:`connect_pair`. Both
ends run exactly the code they run over TCP, because the pair behaves as a socket does towards
its protocols:

* bytes written on one side reach the other side's protocol on a later turn of the event loop,
  in order (``data_received``, or ``get_buffer``/``buffer_updated`` for a buffered protocol);
* a reader that stops reading (``pause_reading``) leaves the bytes queued, and a writer whose
  peer holds more than the high-water mark is told ``pause_writing`` (``resume_writing`` once the
  peer read them down to the low-water mark);
* ``close()`` delivers what was written, then EOF (``eof_received``; the peer closes its side
  unless that returns true), then ``connection_lost(None)`` on both sides; ``abort()`` drops what
  the peer had not read and the peer loses the connection with ``ConnectionResetError``.

There is no TLS: ``get_extra_info("ssl_object")`` and ``("socket")`` are None.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

__all__ = ["MemoryTransport", "connect_pair"]

_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024
_numbers = itertools.count(1)


class MemoryTransport(asyncio.Transport):
    """One end of an in-memory connection (see the module docstring for its socket-like rules)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, extra: dict[str, Any]) -> None:
        super().__init__(extra)
        self._loop = loop
        self._protocol: asyncio.BaseProtocol | None = None
        self._peer: MemoryTransport | None = None
        self._inbox = bytearray()  # written by the peer, not yet handed to our protocol
        self._eof_in = False  # the peer closed or half-closed: EOF follows the inbox
        self._delivery: asyncio.Handle | None = None
        self._reading = True
        self._closing = False
        self._lost = False
        self._writer_paused = False  # we told our protocol to pause writing
        self._high = _HIGH_WATER
        self._low = _LOW_WATER

    def __repr__(self) -> str:
        state = "lost" if self._lost else "closing" if self._closing else "open"
        return f"<MemoryTransport {self.get_extra_info('peername')} {state} inbox={len(self._inbox)}>"

    # -- asyncio.BaseTransport / ReadTransport / WriteTransport --

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._protocol is not None
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return self._reading and not self._closing

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if not self._reading:
            self._reading = True
            self._schedule()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        peer = self._peer
        if self._closing or peer is None or peer._lost or not data:
            return  # like a socket transport after close: the bytes go nowhere
        peer._inbox += data
        peer._schedule()
        if not self._writer_paused and len(peer._inbox) > self._high:
            self._writer_paused = True
            self._call("pause_writing")

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        peer = self._peer
        if peer is not None and not peer._eof_in:
            peer._eof_in = True
            peer._schedule()

    def get_write_buffer_size(self) -> int:
        return len(self._peer._inbox) if self._peer is not None else 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (self._low, self._high)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._high = _HIGH_WATER if high is None else high
        self._low = (self._high // 4) if low is None else low

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.write_eof()
        self._lose(None)

    def abort(self) -> None:
        self._closing = True
        peer = self._peer
        if peer is not None and not peer._lost:
            peer._inbox.clear()
            peer._closing = True
            peer._lose(ConnectionResetError("the peer reset the in-memory connection"))
        self._lose(None)

    # -- delivery --

    def _schedule(self) -> None:
        if self._delivery is None and self._reading and not self._lost:
            self._delivery = self._loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        self._delivery = None
        if self._lost or not self._reading:
            return
        if self._inbox:
            data = bytes(self._inbox)
            self._inbox.clear()
            try:
                self._hand_over(data)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # as asyncio's socket transports: report, then drop the link
                self._loop.call_exception_handler(
                    {"message": "fatal error in a protocol over a MemoryTransport", "exception": exc}
                )
                self.abort()
                return
            peer = self._peer
            if peer is not None and peer._writer_paused and len(self._inbox) <= peer._low:
                peer._writer_paused = False
                peer._call("resume_writing")
        if self._eof_in and not self._inbox and not self._closing:
            keep_open = self._call("eof_received")
            if not keep_open:
                self.close()

    def _hand_over(self, data: bytes) -> None:
        protocol = self._protocol
        if isinstance(protocol, asyncio.BufferedProtocol):
            view = memoryview(data)
            while view:
                buf = memoryview(protocol.get_buffer(len(view)))
                n = min(len(buf), len(view))
                buf[:n] = view[:n]
                protocol.buffer_updated(n)
                view = view[n:]
        elif isinstance(protocol, asyncio.Protocol):
            protocol.data_received(data)

    def _lose(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        if self._delivery is not None:
            self._delivery.cancel()
            self._delivery = None
        self._loop.call_soon(self._call, "connection_lost", exc)

    def _call(self, name: str, *args: object) -> Any:
        return getattr(self._protocol, name)(*args)


def connect_pair(
    client: asyncio.BaseProtocol, server: asyncio.BaseProtocol, *, name: str = "memory"
) -> tuple[MemoryTransport, MemoryTransport]:
    """Join ``client`` and ``server`` by a new in-memory connection; both have seen
    ``connection_made`` when this returns (the server first, as an accepted socket would).
    Returns the client's transport and the server's."""
    loop = asyncio.get_running_loop()
    number = next(_numbers)
    client_side = MemoryTransport(loop, {"peername": (name, 0), "sockname": (name, number)})
    server_side = MemoryTransport(loop, {"peername": (name, number), "sockname": (name, 0)})
    client_side._peer, server_side._peer = server_side, client_side
    client_side._protocol, server_side._protocol = client, server
    server.connection_made(server_side)
    client.connection_made(client_side)
    return client_side, server_side
