"""The handler's view of one execution: :class:`TaskContext` and its :class:`CancelSignal`.

A context describes a single task, or a whole batch:

* single task: ``id``/``type``/``queue``/``retried``/``max_retry``/``metadata`` are the
  task's; ``ids == (id,)``; ``is_batch`` is False; ``tasks == (task,)``.
* batch (or a batch-typed task delivered alone, a batch of one): ``is_batch`` is True,
  ``id`` is the job id (``"batch:<first member id>"``, or the task id for a batch of
  one), ``ids`` lists every member in order, ``group`` is the aggregation group,
  ``retried``/``max_retry``/``metadata`` are the FIRST member's (look at ``ctx.tasks``
  for per-member values).

Cancellation is cooperative for sync handlers (check ``ctx.cancelled`` or call
``ctx.raise_if_cancelled()``; block with ``ctx.wait_cancelled(timeout)`` instead of
``time.sleep``) and both cooperative and forced for async handlers (their coroutine is
also cancelled). ``report_progress`` is safe from any thread; the core coalesces it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from conveyor_sdk._worker.executor import CancelReason, Job, TaskData
from conveyor_sdk._worker.outcomes import TaskCancelled

__all__ = ["CancelSignal", "TaskContext"]

ProgressSink = Callable[[str, int, str], None]


# One lock for every signal: it guards a few field updates, never a wait, and a signal is
# built for every job (a lock each would be one more allocation on the way to the handler).
_LOCK = threading.Lock()


class CancelSignal:
    """A thread-safe, one-shot cancellation flag with a reason, awaitable from any loop.

    The ``threading.Event`` behind :meth:`wait` is made by the first thread that waits: most
    jobs are never cancelled nor waited on, and this object is built for every job.
    """

    __slots__ = ("_armed", "_event", "_fired", "_reason", "_waiters")

    def __init__(self) -> None:
        self._armed: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None
        self._fired = False
        self._event: threading.Event | None = None
        self._reason: CancelReason | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = []

    @property
    def is_set(self) -> bool:
        """True once :meth:`set` was called."""
        return self._fired

    @property
    def reason(self) -> CancelReason | None:
        """Why the job was cancelled (None while not cancelled)."""
        return self._reason

    def set(self, reason: CancelReason) -> None:
        """Fire the signal (first reason wins); wakes threads and coroutines waiting on it."""
        with _LOCK:
            if self._fired:
                return
            self._reason = reason
            self._fired = True
            if self._event is not None:
                self._event.set()
            waiters, self._waiters = self._waiters, []
            armed = self._armed
        if armed is not None and not armed[0].is_closed():
            armed[0].call_soon_threadsafe(self._cancel_armed, armed[1])
        for loop, callback in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(callback)

    def arm(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> bool:
        """Have :meth:`set` cancel ``task`` (in ``loop``) until :meth:`disarm`.

        The cheap form of ``add_callback(loop, task.cancel)`` for the task that runs an async
        handler: no lock, closure or list per job. One task at a time: False (nothing armed)
        while another task is armed, so the caller falls back to :meth:`add_callback`. A
        cancel already scheduled when :meth:`disarm` runs is dropped: it never reaches the
        code after the handler.
        """
        if self._armed is not None:
            return False
        self._armed = (loop, task)
        return True

    def disarm(self, task: asyncio.Task[Any]) -> None:
        """Stop cancelling ``task`` (no-op when it is not the armed one)."""
        armed = self._armed
        if armed is not None and armed[1] is task:
            self._armed = None

    def _cancel_armed(self, task: asyncio.Task[Any]) -> None:
        armed = self._armed
        if armed is not None and armed[1] is task:
            task.cancel()

    def add_callback(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> bool:
        """Run ``callback`` in ``loop`` when the signal fires; False (not added) if already set."""
        with _LOCK:
            if self._fired:
                return False
            self._waiters.append((loop, callback))
            return True

    def remove_callback(self, callback: Callable[[], None]) -> None:
        """Forget a callback added with :meth:`add_callback` (no-op if absent)."""
        with _LOCK:
            self._waiters = [(lp, cb) for lp, cb in self._waiters if cb is not callback]

    def wait(self, timeout: float | None = None) -> bool:
        """Block the calling thread until cancelled or ``timeout``; True when cancelled."""
        with _LOCK:
            if self._fired:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    async def wait_async(self) -> CancelReason | None:
        """Wait (in any event loop) until cancelled; returns the reason."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            _resolve(fut)

        if self.add_callback(loop, wake):
            try:
                await fut
            finally:
                self.remove_callback(wake)
        return self._reason


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _to_datetime(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=UTC)


class TaskContext:
    """What a handler gets as ``ctx``. See the module docstring for batch semantics."""

    __slots__ = ("_progress", "_signal", "extras", "job")

    def __init__(
        self,
        job: Job,
        signal: CancelSignal | None = None,
        report_progress: ProgressSink | None = None,
    ) -> None:
        self.job = job
        self._signal = signal or CancelSignal()
        self._progress = report_progress
        self.extras: dict[str, Any] = {}  # free space for middleware (e.g. a tracing span)

    # -- identity ---------------------------------------------------------------
    @property
    def id(self) -> str:
        """Task id (single) or job id (batch)."""
        return self.job.job_id

    @property
    def ids(self) -> tuple[str, ...]:
        """Every task id this execution covers, in order."""
        return tuple(t.id for t in self.job.tasks)

    @property
    def tasks(self) -> tuple[TaskData, ...]:
        """The delivered task(s)."""
        return self.job.tasks

    @property
    def task(self) -> TaskData:
        """The (first) delivered task."""
        return self.job.tasks[0]

    @property
    def is_batch(self) -> bool:
        """True when a batch handler runs this execution."""
        return self.job.batch

    @property
    def group(self) -> str:
        """Aggregation group of a batch ('' for singles)."""
        return self.job.tasks[0].group if self.job.tasks else ""

    @property
    def type(self) -> str:
        return self.job.type

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def retried(self) -> int:
        return self.task.retried

    @property
    def max_retry(self) -> int:
        return self.task.max_retry

    @property
    def metadata(self) -> Mapping[str, str]:
        return self.task.metadata

    @property
    def deadline(self) -> datetime | None:
        """Effective deadline at start (UTC); the core cancels with DEADLINE when it passes."""
        return _to_datetime(self.job.deadline)

    # -- cancellation -----------------------------------------------------------
    @property
    def signal(self) -> CancelSignal:
        return self._signal

    @property
    def cancelled(self) -> bool:
        """True once the core cancelled this execution."""
        return self._signal.is_set

    @property
    def cancel_reason(self) -> CancelReason | None:
        """DEADLINE, SERVER_CANCEL or DRAIN once cancelled; None before."""
        return self._signal.reason

    def raise_if_cancelled(self) -> None:
        """Raise :class:`TaskCancelled` if the execution was cancelled."""
        if self._signal.is_set:
            raise TaskCancelled(self._signal.reason)

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block (sync handlers) up to ``timeout`` s; True when cancelled. Use instead of sleep."""
        return self._signal.wait(timeout)

    async def until_cancelled(self) -> CancelReason | None:
        """Await cancellation (async handlers); returns the reason."""
        return await self._signal.wait_async()

    # -- progress -----------------------------------------------------------------
    def report_progress(self, percent: int, message: str = "", *, task_id: str | None = None) -> None:
        """Record progress (0..100) for the task (or ``task_id`` of a batch member); any thread."""
        if self._progress is None:
            return
        pct = max(0, min(100, int(percent)))
        if task_id is not None:
            self._progress(task_id, pct, message)
            return
        for tid in self.ids:
            self._progress(tid, pct, message)

    def __repr__(self) -> str:
        state = f"cancelled={self.cancel_reason.value}" if self.cancel_reason else "running"
        return f"<TaskContext {self.type} id={self.id} n={len(self.job.tasks)} {state}>"
