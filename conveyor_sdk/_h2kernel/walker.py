"""Frame boundaries of an HTTP/2 byte stream, read from the 9-byte frame headers alone.

The public path needs to know where frames start and end without looking into h2's buffers: the
client splits a read after a GOAWAY (:class:`.client.PublicConnection`), the server's guard checks
a frame's length as soon as its header is there (:class:`.guard.PublicGuardBuffer`).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["HEADER", "FrameWalker"]

HEADER = 9

# (end offset in the data just fed, type, flags, stream id, payload length)
Frame = tuple[int, int, int, int, int]


class FrameWalker:
    """Follows frame boundaries across reads; ``on_header`` sees each header as it completes."""

    __slots__ = ("_cur", "_head", "_left", "_skip", "on_header")

    def __init__(self, *, preamble: int = 0, on_header: Callable[[int, int, int, int], None] | None = None):
        self._skip = preamble  # bytes of the client preface to pass over first (a server)
        self._head = bytearray()
        self._cur: tuple[int, int, int, int] | None = None  # type, flags, stream id, length
        self._left = 0
        self.on_header = on_header

    @property
    def current(self) -> tuple[int, int, int, int] | None:
        """Type, flags, stream id and length of the frame whose payload is still arriving."""
        return self._cur

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """The frames that end within ``data``, in order."""
        done: list[Frame] = []
        i, n = 0, len(data)
        if self._skip:
            i = min(self._skip, n)
            self._skip -= i
        while True:
            if self._cur is None:
                if i >= n:
                    break
                chunk = data[i : i + HEADER - len(self._head)]
                self._head += chunk
                i += len(chunk)
                if len(self._head) < HEADER:
                    break
                head, self._head = self._head, bytearray()
                length = int.from_bytes(head[:3], "big")
                self._cur = cur = (head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF, length)
                self._left = length
                if self.on_header is not None:
                    self.on_header(*cur)
            take = min(self._left, n - i)
            i += take
            self._left -= take
            if self._left:
                break
            done.append((i, *self._cur))
            self._cur = None
        return done
