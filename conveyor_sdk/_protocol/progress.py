"""Progress coalescing: at most one Progress frame per task per interval, last value wins."""

from __future__ import annotations

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

__all__ = ["ProgressCoalescer"]


def _frame(task_id: str, percent: int, message: str) -> pb.WorkerMessage:
    msg = pb.WorkerMessage()
    msg.progress.task_id = task_id
    msg.progress.percent = max(0, min(100, percent))
    msg.progress.message = message
    return msg


class ProgressCoalescer:
    """Decides when a Progress frame may go out; holds the latest pending value per task."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.sent = 0
        self._last: dict[str, float] = {}
        self._pending: dict[str, tuple[int, str]] = {}

    def record(self, task_id: str, percent: int, message: str, now: float) -> pb.WorkerMessage | None:
        """A new value: the frame to send now, or None (kept pending until the interval passes)."""
        last = self._last.get(task_id)
        if last is not None and now - last < self.interval:
            self._pending[task_id] = (percent, message)
            return None
        self._pending.pop(task_id, None)
        return self._emit(task_id, percent, message, now)

    def due(self, now: float) -> list[pb.WorkerMessage]:
        """Pending values whose interval has passed."""
        ready = [t for t in self._pending if now - self._last[t] >= self.interval]
        return [self._emit(t, *self._pending.pop(t), now) for t in ready]

    def next_deadline(self) -> float | None:
        return min((self._last[t] + self.interval for t in self._pending), default=None)

    def forget(self, task_id: str) -> None:
        self._last.pop(task_id, None)
        self._pending.pop(task_id, None)

    def clear(self) -> None:
        self._last.clear()
        self._pending.clear()

    def _emit(self, task_id: str, percent: int, message: str, now: float) -> pb.WorkerMessage:
        self._last[task_id] = now
        self.sent += 1
        return _frame(task_id, percent, message)
