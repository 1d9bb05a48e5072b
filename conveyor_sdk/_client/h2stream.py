"""One call's stream as the async client's HTTP/2 connection keeps it, and its response headers' form."""

from __future__ import annotations

import asyncio
from collections import deque

from conveyor_sdk._h2kernel.client import str_headers
from conveyor_sdk._transport.signal import Signal
from conveyor_sdk.errors import ConveyorError

__all__ = ["HEADS_KEPT", "H2Stream", "Head", "response_head"]

HEADS_KEPT = 16  # distinct response header blocks a connection keeps converted
Head = tuple[tuple[tuple[str, str], ...], int, tuple[tuple[str, str], ...]]


class H2Stream:
    """The state of one call: response headers, unread DATA, trailers, outcome."""

    __slots__ = (
        "chunks", "deadline", "ended", "error", "fields", "headers", "id", "status", "timed_out", "trailers",
        "wake",
    )  # fmt: skip

    def __init__(self, stream_id: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.id = stream_id
        self.deadline: float | None = None  # loop time; see H2Conn.watch
        self.timed_out = False  # the deadline passed before the stream was done
        self.headers: tuple[tuple[str, str], ...] | None = None  # as received, pseudo-headers too
        self.status = 0  # ``:status`` (0 when missing or not a number)
        self.fields: tuple[tuple[str, str], ...] = ()  # ``headers`` without the pseudo-headers
        self.chunks: deque[tuple[bytes, int]] = deque()  # (payload, flow-controlled length)
        self.trailers: list[tuple[str, str]] = []
        self.ended = False  # the server finished the stream (END_STREAM)
        self.error: ConveyorError | None = None
        self.wake = Signal(loop)

    @property
    def done(self) -> bool:
        """No more input will arrive (ended or failed)."""
        return self.ended or self.error is not None


def response_head(raw: object) -> Head:
    """A response header list (h2's) as str pairs, its ``:status``, and the pairs without pseudo-headers."""
    pairs = tuple(str_headers(raw).items())
    status, fields = 0, []
    for name, value in pairs:
        if name == ":status":
            status = int(value) if value.isdigit() else 0
        elif not name.startswith(":"):
            fields.append((name, value))
    return pairs, status, tuple(fields)
