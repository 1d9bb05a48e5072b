"""What the driver consumes: the session stream it reads and writes, and the events posted to it.

Everything that happens outside the driver's own loop (a job ended, a handler reported progress,
the executor freed capacity, a connect attempt finished, a stop was asked for, the stream ended)
reaches it as one of the small frozen events below, in order, through ``Driver.post``. Frames
are not events: the driver takes them off the stream itself (``Driver._take_frames``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._worker.executor import Outcome
from conveyor_sdk.errors import ConveyorError

__all__ = [
    "CapacityFreed",
    "Event",
    "JobDone",
    "Opened",
    "ProgressReported",
    "SessionStreamLike",
    "StopRequested",
    "StreamEnded",
]


class SessionStreamLike(Protocol):
    """What the driver uses of a session stream (``_transport.SessionStream`` is one)."""

    @property
    def finished(self) -> bool:
        """True once the stream ended (clean or not); frames read before the end stay readable."""
        ...

    @property
    def error(self) -> ConveyorError | None:
        """Why the stream ended (None: a clean end, or not ended)."""
        ...

    @property
    def write_blocked(self) -> bool:
        """Whether queued bytes wait for the peer's window or a full socket."""
        ...

    def recv_nowait(self) -> pb.ServerMessage | None: ...

    def set_listener(self, listener: Callable[[], None] | None) -> None:
        """Have ``listener()`` called in the socket's turn when frames arrive or the stream ends."""
        ...

    def send_nowait(self, msg: pb.WorkerMessage) -> None: ...

    def close_send_nowait(self) -> None: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class JobDone:
    """A started job ended with one outcome per task (in delivery order)."""

    job_id: str
    outcomes: list[Outcome]


@dataclass(frozen=True, slots=True)
class ProgressReported:
    """Handler code reported progress on one task (from any thread)."""

    task_id: str
    percent: int
    message: str


@dataclass(frozen=True, slots=True)
class CapacityFreed:
    """The executor can take work it refused before (its ``wakeup`` callback)."""


@dataclass(frozen=True, slots=True)
class Opened:
    """A connect attempt finished: the new stream, or why there is none."""

    result: SessionStreamLike | ConveyorError


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """``stream`` ended or failed (ignored when it is no longer the driver's stream)."""

    stream: SessionStreamLike
    error: ConveyorError | None


@dataclass(frozen=True, slots=True)
class StopRequested:
    """``Worker.stop``: ``grace`` None drains (a second stop releases), 0 releases at once."""

    grace: float | None


Event = JobDone | ProgressReported | CapacityFreed | Opened | StreamEnded | StopRequested
