"""What executors tell observers (metrics, live view): documented no-op hooks, and the wrapper
that observes an in-process executor.

The process executor calls the hooks itself (it knows the child and the child's own run
time). With ``--processes 0`` handlers run in the supervisor's executor, which knows
nothing of observers: :class:`ObservedExecutor` wraps it and calls the same two job
hooks, with ``child=None``, so ``/metrics`` gets the same per-task families either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from conveyor_sdk._worker.executor import CancelReason, Executor, Job, JobControl, Outcome

if TYPE_CHECKING:
    from conveyor_sdk._runtime.pipe import MetricsReport
    from conveyor_sdk._runtime.proc import ChildProc

__all__ = ["NullObserver", "ObservedExecutor", "Observer"]


class Observer(Protocol):
    """Hooks called on the supervisor's loop; they must be quick and never raise."""

    def child_started(self, child: ChildProc) -> None: ...

    def child_exited(self, child: ChildProc) -> None: ...

    def child_restarted(self, child: ChildProc, reason: str) -> None: ...

    def child_metrics(self, child: ChildProc, report: MetricsReport) -> None: ...

    def job_started(self, job: Job, child: ChildProc | None) -> None: ...

    def job_finished(self, job: Job, outcomes: Sequence[Outcome], duration: float) -> None: ...


class NullObserver:
    """Observer that ignores everything."""

    def child_started(self, child: ChildProc) -> None:
        """A child process was spawned."""

    def child_exited(self, child: ChildProc) -> None:
        """A child process is gone (any reason)."""

    def child_restarted(self, child: ChildProc, reason: str) -> None:
        """A child was replaced (crash, kill after a hard timeout, recycling)."""

    def child_metrics(self, child: ChildProc, report: MetricsReport) -> None:
        """A child reported the custom metrics that changed."""

    def job_started(self, job: Job, child: ChildProc | None) -> None:
        """A job was sent to ``child`` (``None``: it starts in this process)."""

    def job_finished(self, job: Job, outcomes: Sequence[Outcome], duration: float) -> None:
        """A job ended (``duration`` in seconds; no ``outcomes`` if the executor raised)."""


class ObservedExecutor:
    """An executor whose ``run`` is an ``async def``, with its jobs reported to ``observer``.

    ``duration`` is the time ``run`` took: the executor only starts a job it has room for
    (``can_start``), so this is the handler's run time, as a child measures its own.
    """

    def __init__(
        self, inner: Executor, observer: Observer, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.inner = inner
        self.observer = observer
        self.clock = clock

    def __repr__(self) -> str:
        return f"<ObservedExecutor {self.inner!r}>"

    async def start(self, wakeup: Callable[[], None]) -> None:
        await self.inner.start(wakeup)

    def can_start(self, job: Job) -> bool:
        return self.inner.can_start(job)

    async def run(self, job: Job, control: JobControl) -> list[Outcome]:
        observer, clock = self.observer, self.clock
        observer.job_started(job, None)
        began = clock()
        outcomes: list[Outcome] = []
        try:
            outcomes = await self.inner.run(job, control)
            return outcomes
        finally:  # also on a contract breach (a raise): the job is not running any more
            observer.job_finished(job, outcomes, clock() - began)

    def cancel(self, job_id: str, reason: CancelReason) -> None:
        self.inner.cancel(job_id, reason)

    async def close(self, grace: float) -> None:
        await self.inner.close(grace)
