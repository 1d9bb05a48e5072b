"""Frame outbox for one end of a supervisor/child pipe: the first frame of a loop turn leaves at
once, the rest of that turn leave together.

A RunJob is on the latency path of every task (Dispatch -> handler start), so it must not wait
for the next event-loop iteration; a burst (many JobDones, a RunJob per freed slot) still costs at
most two writes per iteration instead of one per frame. A frame sent with ``soon=True`` (a RunJob
for a child that is already running jobs: it reads its pipe between them anyway) waits for the
turn's end too, so a busy pipe costs one write per iteration. A child sends its JobDones that
way: the ones of a turn wake the supervisor once, not once for the first and again for the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Outbox"]


class Outbox:
    """Writes encoded frames to the transport returned by ``writer()`` (skipped when closed)."""

    __slots__ = ("_pending", "_turn_open", "_writer")

    def __init__(self, writer: Callable[[], asyncio.WriteTransport | None]) -> None:
        self._writer = writer
        self._pending: list[bytes] = []
        self._turn_open = False  # a frame went out in this loop turn; later ones wait for flush()

    def send(self, frame: bytes, *, soon: bool = False) -> None:
        """Write ``frame`` now if it is the turn's first; else (or with ``soon``) at the turn's end."""
        if self._turn_open:
            self._pending.append(frame)
            return
        self._turn_open = True
        asyncio.get_running_loop().call_soon(self.flush)
        if soon:
            self._pending.append(frame)
            return
        writer = self._writer()  # _write, inlined: this is a RunJob's way out
        if writer is not None and not writer.is_closing():
            writer.write(frame)

    def flush(self) -> None:
        """Write what waits (also at shutdown); the next frame leaves at once again."""
        self._turn_open = False
        if self._pending:
            data, self._pending = b"".join(self._pending), []
            self._write(data)

    def _write(self, data: bytes) -> None:
        writer = self._writer()
        if writer is not None and not writer.is_closing():
            writer.write(data)
