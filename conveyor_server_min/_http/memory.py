"""Hand freed heap memory back to the operating system after connections close (glibc only).

Python frees a closed connection's buffers, but glibc keeps the freed heap
pages for reuse, so a burst of large reads (an attack, or just big uploads)
leaves the RSS high long after the connections are gone. ``malloc_trim(0)``
returns those pages. :class:`Trimmer` calls it (after a young-generation
garbage collection) at most once per ``interval`` after a connection closed;
on other C libraries only the collection runs.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
from collections.abc import Callable

__all__ = ["Trimmer"]


def _load_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]  # ctypes function pointer


_MALLOC_TRIM = _load_malloc_trim()


class Trimmer:
    """Debounced ``malloc_trim``: ``poke()`` on every closed connection."""

    __slots__ = ("_handle", "interval")

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._handle: asyncio.TimerHandle | None = None

    def poke(self) -> None:
        """A connection closed: trim once ``interval`` from now (unless one is already due)."""
        if self._handle is not None:
            return
        self._handle = asyncio.get_running_loop().call_later(self.interval, self._trim)

    def cancel(self) -> None:
        """Drop a pending trim (server stopping)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _trim(self) -> None:
        self._handle = None
        # Closed connections are partly reference cycles (h2's connection object); they are young,
        # so a cheap young-generation collection frees them before the trim.
        gc.collect(1)
        if _MALLOC_TRIM is not None:
            _MALLOC_TRIM(0)
