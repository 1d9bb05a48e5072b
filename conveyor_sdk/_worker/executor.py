"""The executor seam: how the worker core hands work to something that runs it.

The worker core (session, gate, deadlines, drain) never runs a handler itself.
It builds a :class:`Job` (one task, or one batch of tasks) and awaits
``executor.run(job, control)``. Executors decide *where* handler code runs:

* ``InlineExecutor``/``ThreadExecutor`` (worker core): async handlers on the
  worker's loop, sync handlers in a thread pool.
* ``ProcessExecutor`` (multi-process runtime): child processes that import the
  app once; jobs and outcomes cross a pipe as compact frames built from the
  plain fields below (never pickled user objects).

Contract (every executor):

1. ``run`` never raises for a handler failure: it returns one :class:`Outcome`
   per task of the job, in job order. Infrastructure failures (a child died, a
   kill after a hard timeout) are outcomes too (``RETRY`` with a message such as
   ``"worker process died: SIGKILL"`` or ``"deadline exceeded"``).
2. ``cancel(job_id, reason)`` asks a running job to stop cooperatively (the
   handler's context signal fires with that reason). The executor may enforce a
   hard stop after its own grace. When a job ends *because* it was cancelled,
   its outcomes carry ``cancelled=True`` and the core maps them by reason
   (deadline / server-cancel -> RETRY, drain -> RELEASED).
3. ``can_start(job)`` is a cheap, synchronous capacity check (e.g. a per-queue
   process pool with a free slot). The core never calls ``run`` for a job that
   ``can_start`` refused; it parks the job and retries when the executor calls
   the ``wakeup`` callback given to ``start``.
4. Progress reported by handler code reaches ``control.report_progress`` (from
   any thread; the core coalesces).
5. ``close(grace)`` stops accepting, waits up to ``grace`` seconds for running
   jobs, then stops them; after it returns no handler code of this executor runs.
6. ``run`` may be a plain method that returns an awaitable (a hand-off): its
   synchronous part must pass the job on (or fail it in the awaitable) and register
   it, so that a ``cancel`` made before the awaitable is awaited reaches it. The core
   then calls ``run`` in the event-loop turn that read the Dispatch, after every
   frame of that read (a Cancel read with it still wins), so the job leaves before
   any task of the core runs (``ProcessExecutor`` writes its RunJob there). An
   ``async def run`` is called from the job's own task, one loop turn later.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

# Defined in the protocol layer (the session machine names them); re-exported here unchanged.
from conveyor_sdk._protocol.types import CancelReason, OutcomeKind

__all__ = [
    "CancelReason",
    "Executor",
    "Job",
    "JobControl",
    "Outcome",
    "OutcomeKind",
    "TaskData",
]


@dataclass(frozen=True, slots=True)
class TaskData:
    """Plain, picklable-free view of one delivered task (what crosses to executors)."""

    id: str
    queue: str
    type: str
    payload: bytes
    content_type: str
    metadata: Mapping[str, str]
    retried: int
    max_retry: int
    enqueued_at: float | None = None  # epoch seconds
    timeout: float | None = None  # seconds, from TaskOptions.timeout
    task_deadline: float | None = None  # epoch seconds, from TaskOptions.deadline
    group: str = ""
    process_at: float | None = None  # epoch seconds, from TaskOptions.process_at (as enqueued)


@dataclass(frozen=True, slots=True)
class Job:
    """One unit handed to an executor: a single task or a whole batch."""

    job_id: str  # the task id for singles; "batch:<first member id>" for batches
    queue: str
    type: str
    tasks: tuple[TaskData, ...]
    batch: bool
    deadline: float | None  # effective wall-clock deadline (epoch seconds) when started


@dataclass(frozen=True, slots=True)
class Outcome:
    """Result of one task: the wire outcome plus its message and result bytes."""

    kind: OutcomeKind
    error_msg: str = ""
    result: bytes = b""
    cancelled: bool = False  # the handler stopped because the job was cancelled
    # The formatted traceback of a raised exception (for logs only; never sent to the server).
    traceback: str = field(default="", compare=False, repr=False)


@dataclass(slots=True)
class JobControl:
    """What the core lends an executor for one job."""

    report_progress: Callable[[str, int, str], None]  # (task_id, percent, message); any thread
    extras: dict[str, object] = field(default_factory=dict)


class Executor(Protocol):
    """Where handler code runs. See the module docstring for the contract."""

    async def start(self, wakeup: Callable[[], None]) -> None:
        """Prepare (spawn pools, import the app); ``wakeup`` signals freed capacity."""
        ...

    def can_start(self, job: Job) -> bool:
        """True when ``run(job)`` would start executing now."""
        ...

    def run(self, job: Job, control: JobControl) -> Awaitable[list[Outcome]]:
        """Execute the job; one outcome per task, in order. Never raises for handler errors.

        Usually an ``async def``. A plain method returning an awaitable is a hand-off (see
        the module docstring, item 6).
        """
        ...

    def cancel(self, job_id: str, reason: CancelReason) -> None:
        """Cooperatively stop a running job (no-op for unknown ids)."""
        ...

    async def close(self, grace: float) -> None:
        """Stop accepting, wait up to ``grace`` s for running jobs, then stop them."""
        ...
