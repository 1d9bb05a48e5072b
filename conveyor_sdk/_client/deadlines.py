"""The deadlines of a connection's open calls, kept by one event-loop timer.

A unary call that waits for its answer needs a deadline, but arming a timer per call
(``asyncio.timeout``: a handle scheduled, pushed on the loop's heap and cancelled again, plus the
context manager around it) is a noticeable share of a sequential producer's Python per call.
One timer serves every stream of a connection here: it is armed for the earliest deadline of the
open streams; when it fires it marks the streams that are due (``timed_out``) and wakes their
readers, and arms itself again for the nearest deadline left. Calls in sequence with one timeout
have rising deadlines, so the timer armed for one call still serves the next ones and a call
schedules nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

from conveyor_sdk._transport.signal import Signal

__all__ = ["DeadlineTimer", "Timed"]


class Timed(Protocol):
    """A stream as the timer sees it."""

    deadline: float | None  # loop time
    timed_out: bool
    wake: Signal


class DeadlineTimer:
    """The one timer of ``streams`` (the connection's open streams, which it only reads)."""

    __slots__ = ("_at", "_handle", "_streams")

    def __init__(self, streams: Mapping[int, Timed]) -> None:
        self._streams = streams
        self._handle: asyncio.TimerHandle | None = None
        self._at = 0.0  # when _handle fires

    def __repr__(self) -> str:
        return f"<DeadlineTimer {'idle' if self._handle is None else f'at {self._at:.3f}'}>"

    @property
    def armed(self) -> asyncio.TimerHandle | None:
        """The loop handle while the timer is armed (statistics, tests)."""
        return self._handle

    def watch(self, stream: Timed, deadline: float) -> None:
        """Mark ``stream`` timed out and wake it once the loop time reaches ``deadline``."""
        stream.deadline = deadline
        if self._handle is None or deadline < self._at:
            self._arm(deadline)

    def cancel(self) -> None:
        """Disarm (the connection is gone)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._at = when
        self._handle = asyncio.get_running_loop().call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        now = asyncio.get_running_loop().time()
        nearest: float | None = None
        for stream in list(self._streams.values()):  # a woken reader may not change it, but be safe
            deadline = stream.deadline
            if deadline is None or stream.timed_out:
                continue
            if deadline <= now:
                stream.timed_out = True
                stream.wake.fire()
            elif nearest is None or deadline < nearest:
                nearest = deadline
        if nearest is not None:
            self._arm(nearest)
