"""What the process executor tells observers (metrics, live view): documented no-op hooks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from conveyor_sdk._worker.executor import Job, Outcome

if TYPE_CHECKING:
    from conveyor_sdk._runtime.pipe import MetricsReport
    from conveyor_sdk._runtime.proc import ChildProc

__all__ = ["NullObserver", "Observer"]


class Observer(Protocol):
    """Hooks called on the supervisor's loop; they must be quick and never raise."""

    def child_started(self, child: ChildProc) -> None: ...

    def child_exited(self, child: ChildProc) -> None: ...

    def child_restarted(self, child: ChildProc, reason: str) -> None: ...

    def child_metrics(self, child: ChildProc, report: MetricsReport) -> None: ...

    def job_started(self, job: Job, child: ChildProc) -> None: ...

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

    def job_started(self, job: Job, child: ChildProc) -> None:
        """A job was sent to ``child``."""

    def job_finished(self, job: Job, outcomes: Sequence[Outcome], duration: float) -> None:
        """A job ended (``duration`` in seconds)."""
