"""Socket reads into one kept buffer on asyncio's own event loop.

A plain ``asyncio.Protocol`` on asyncio's selector loop is fed by ``sock.recv(256 KiB)``. Every
read allocates a fresh 256 KiB bytes object: glibc serves that size with ``mmap``, shrinks it to
the bytes read with ``mremap``, and unmaps the rest when the bytes are freed. That is three
system calls around each ``recvfrom``, and on an idle machine each costs what the read itself
costs (measured on our 2-vCPU VM after 20 ms idle: ``recv(256 KiB)`` of 68 bytes ~100 us,
``recv(100)`` ~45 us). A :class:`BufferedReads` protocol is read with one ``recv_into`` into a
buffer it keeps, and hands ``data_received`` a copy of just the bytes read.

uvloop reads into a buffer of its own either way, and reaches a plain protocol with one Python
call against a buffered one's two (``get_buffer``, ``buffer_updated``): there the plain protocol
stays. :func:`wants_buffered` says which one a loop should get.
"""

from __future__ import annotations

import asyncio

__all__ = ["READ_SIZE", "BufferedReads", "wants_buffered"]

READ_SIZE = 64 * 1024  # the most one read takes: a heap-sized buffer, copied out per read


def wants_buffered(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether protocols on ``loop`` should read through :class:`BufferedReads` (asyncio's own loops)."""
    return isinstance(loop, asyncio.BaseEventLoop)


class BufferedReads(asyncio.BufferedProtocol):
    """Mixin (first base) for a protocol with ``data_received(bytes)``: reads land in one buffer."""

    _read_view: memoryview | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        view = self._read_view
        if view is None:
            view = self._read_view = memoryview(bytearray(READ_SIZE))
        return view

    def buffer_updated(self, nbytes: int) -> None:
        view = self._read_view
        assert view is not None  # get_buffer ran before every read
        self.data_received(view[:nbytes].tobytes())  # type: ignore[attr-defined]
