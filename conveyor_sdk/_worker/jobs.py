"""The driver's jobs: one Job per delivery, from the first capacity check to the report.

A delivery's :class:`Run` is made the first time the machine asks whether it can start
(``can_start``) or starts it, whichever comes first: the handler is looked up and the
:class:`Job` built there, once. The same Run goes to the executor, then to the report of
its outcomes. A later delivery of the same job id (a retry of a parked job that was answered
unstarted) is a new delivery and gets a new Run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from conveyor_sdk._encryption.hooks import Encryptor
from conveyor_sdk._h2kernel.eager import eager_task
from conveyor_sdk._protocol.build import positional_builder
from conveyor_sdk._protocol.inflight import Delivery
from conveyor_sdk._protocol.session import WorkerSession
from conveyor_sdk._protocol.types import CancelReason
from conveyor_sdk._worker.convert import job_for_delivery
from conveyor_sdk._worker.events import Event, JobDone
from conveyor_sdk._worker.executor import Executor, Job, JobControl, Outcome, OutcomeKind
from conveyor_sdk._worker.outcomes import cancelled_outcome, log_abandoned, log_finished, never_retried
from conveyor_sdk._worker.registry import HandlerSpec, Registry
from conveyor_sdk._worker.unseal import run_opened, sealed
from conveyor_sdk.errors import ConveyorError, Internal

__all__ = ["Jobs", "JobsHost", "Run"]


_job_done = positional_builder(JobDone)  # one per finished job (see _protocol/build.py)


class JobsHost(Protocol):
    """What :class:`Jobs` reads from the Worker (``runner.Worker`` is one)."""

    concurrency: int
    task_log: bool

    @property
    def logger(self) -> logging.Logger: ...

    def encryption_for(self, registry: Registry) -> Encryptor | None: ...


@dataclass(slots=True, eq=False)
class Run:
    """One delivery on its way through the executor (mutable: its task and cancel state move)."""

    delivery: Delivery
    job: Job
    spec: HandlerSpec | None  # looked up once; None: no handler (the executor answers for it)
    task: asyncio.Future[Any] | None = None  # the job's task, or the hand-off's future (see _launch)
    handed: bool = False  # the executor has the job: a Cancel goes to it from now on
    cancel: CancelReason | None = None  # a Cancel that came before the executor had the job


class Jobs:
    """Builds, launches, cancels and reports the driver's jobs."""

    def __init__(
        self,
        executor: Executor,
        registry: Registry,
        worker: JobsHost,
        *,
        machine: WorkerSession,
        control: JobControl,
        post: Callable[[Event], None],
    ) -> None:
        self.executor = executor
        self.registry = registry
        self.worker = worker
        self.machine = machine
        self.log = worker.logger
        self.control = control
        self.post = post
        self.prepared: dict[str, Run] = {}  # checked for capacity, not started (parked, as a rule)
        self.running: dict[str, Run] = {}  # started, until the driver handled its JobDone
        self.held: list[Run] | None = None  # started by the frames of one read, launched after them
        # An executor whose ``run`` is a plain method hands a job off in its synchronous part
        # (ProcessExecutor writes the RunJob): it is called when the job is launched.
        self.hands_off = not inspect.iscoroutinefunction(executor.run)
        self.counters: dict[str, int] = {"jobs_started": 0, "handler_failures": 0}

    # -- the machine's questions and actions -------------------------------------------------------
    def can_start(self, delivery: Delivery) -> bool:
        return self.executor.can_start(self._prepare(delivery).job)

    def _prepare(self, delivery: Delivery) -> Run:
        run = self.prepared.get(delivery.job_id)
        if run is not None and run.delivery is delivery:
            return run
        spec = self.registry.lookup(delivery.type)
        run = Run(delivery, job_for_delivery(delivery, spec), spec)
        if len(self.prepared) > 4 * self.worker.concurrency + 64:  # drop answered-unstarted ones
            self.prepared = {k: v for k, v in self.prepared.items() if self.machine.job(k)}
        self.prepared[delivery.job_id] = run
        return run

    def start(self, delivery: Delivery, deadline: float | None) -> None:
        """The machine's Start: the Run goes to ``running`` and is launched (now, or after the read)."""
        run = self.prepared.pop(delivery.job_id, None)
        if run is None or run.delivery is not delivery:
            run = self._prepare(delivery)
            del self.prepared[delivery.job_id]
        if run.job.deadline != deadline:  # a timeout counts from the start, known only now
            run.job = dataclasses.replace(run.job, deadline=deadline)
        self.counters["jobs_started"] += 1
        self.running[delivery.job_id] = run
        if self.held is not None:
            self.held.append(run)
        else:
            self._launch(run, eager=False)

    def cancel(self, job_id: str, reason: CancelReason) -> None:
        run = self.running.get(job_id)
        if run is not None and not run.handed:  # the executor has not seen the job yet
            run.cancel = reason
        else:
            self.executor.cancel(job_id, reason)

    def forget_unstarted(self) -> None:
        """The stream ended: its parked deliveries are gone."""
        self.prepared.clear()

    # -- launching ---------------------------------------------------------------------------------
    def hold_launches(self) -> list[Run]:
        """From now on, started jobs wait in the returned list for :meth:`launch_held`."""
        held: list[Run] = []
        self.held = held
        return held

    def launch_held(self, held: list[Run], *, eager: bool) -> ConveyorError | None:
        """Launch what was held (``eager``: each first step at once, see :meth:`_launch`); the
        first failure is returned (the caller may run in a socket callback and ends the stream
        with it), never raised: these jobs are started in the machine already."""
        self.held = None
        failure: ConveyorError | None = None
        for run in held:
            try:
                self._launch(run, eager=eager)
            except Exception as exc:  # isolation point: a socket callback must never raise
                failure = failure or Internal(f"cannot start job {run.job.job_id}: {exc!r}")
        return failure

    def _launch(self, run: Run, *, eager: bool) -> None:
        """Create the job's task; ``eager``: run its first step at once, inside that task.

        A hand-off executor first gets the job (``run``'s synchronous part), unless a Cancel
        came first; from then on a Cancel goes to the executor. When it returns a future, that
        future is the job (:meth:`_handed_done` reports it) and no task is made. With ``eager`` (outside any
        task: the read's turn) the job's first step, the handler's start, runs before the rest
        of the read and the loop's next turn (``_h2kernel.eager.eager_task``).
        """
        job = run.job
        loop = asyncio.get_running_loop()
        handed: Awaitable[list[Outcome]] | None = None
        if self.hands_off and run.cancel is None and not sealed(job):
            run.handed = True
            try:
                handed = self.executor.run(job, self.control)
            except Exception as exc:  # isolation point: becomes the job's RETRY outcome in _run_job
                failed: asyncio.Future[list[Outcome]] = loop.create_future()
                failed.set_exception(exc)
                handed = failed
        if isinstance(handed, asyncio.Future):
            # The executor's future completes the job through a callback, without a task of
            # ours per job. Cancelling it (shutdown) releases the job, as cancelling a task
            # that awaits it would.
            run.task = handed
            handed.add_done_callback(functools.partial(self._handed_done, run))
            return
        name = f"conveyor-job-{job.job_id}"
        coro = self._run_job(run, handed)
        run.task = eager_task(loop, coro, name) if eager else loop.create_task(coro, name=name)

    async def _run_job(self, run: Run, handed: Awaitable[list[Outcome]] | None) -> None:
        job = run.job
        if handed is None:
            if run.cancel is not None:
                # Cancelled between Start and this first step (e.g. Dispatch and Cancel in one
                # read): the handler never runs; the machine turns this into the reason's outcome.
                self.post(JobDone(job.job_id, [cancelled_outcome() for _ in job.tasks]))
                return
            run.handed = True
        try:
            if handed is not None:  # the executor has it already (see _launch)
                outcomes = await handed
            elif sealed(job):
                outcomes = await run_opened(
                    job,
                    lambda opened: self.executor.run(opened, self.control),
                    lambda: self.worker.encryption_for(self.registry),
                )
            else:  # plaintext (the usual case): one coroutine less between the Dispatch and the handler
                outcomes = await self.executor.run(job, self.control)
        except asyncio.CancelledError:
            self.post(JobDone(job.job_id, [Outcome(OutcomeKind.RELEASED, "worker stopped")] * len(job.tasks)))
            raise
        except Exception as exc:  # isolation point: an executor failure is the task's outcome
            self.log.exception("executor failed on %s", job.job_id)
            outcomes = [Outcome(OutcomeKind.RETRY, f"executor failed: {exc!r}")] * len(job.tasks)
        self.post(_job_done(job.job_id, outcomes))

    def _handed_done(self, run: Run, handed: asyncio.Future[list[Outcome]]) -> None:
        """A hand-off's future is done: its outcomes (as :meth:`_run_job` would report them)."""
        job = run.job
        if handed.cancelled():
            outcomes = [Outcome(OutcomeKind.RELEASED, "worker stopped")] * len(job.tasks)
        elif (exc := handed.exception()) is not None:  # an executor failure is the task's outcome
            self.log.error("executor failed on %s", job.job_id, exc_info=exc)
            outcomes = [Outcome(OutcomeKind.RETRY, f"executor failed: {exc!r}")] * len(job.tasks)
        else:
            outcomes = handed.result()
        self.post(_job_done(job.job_id, outcomes))

    # -- reporting ---------------------------------------------------------------------------------
    def finished(self, job_id: str, outcomes: list[Outcome], now: float) -> list[Outcome]:
        """Settle and log a finished job's outcomes: one line per task, failures counted.

        A task type declared ``max_retry=0`` gets SKIP_RETRY for a failed attempt (see
        ``never_retried``); cancelled outcomes are logged as what the machine will send
        (a timeout is "deadline exceeded" with its retry fate, a drain a release).
        """
        run = self.running.pop(job_id, None)
        task_log = self.worker.task_log
        if not task_log and all(o.kind is OutcomeKind.SUCCESS for o in outcomes):
            return outcomes  # nothing to say
        rec = self.machine.job(job_id)
        reason = rec.cancel_reason if rec is not None else None
        tasks = run.job.tasks if run is not None and len(run.job.tasks) == len(outcomes) else ()
        if run is not None and run.spec is not None and run.spec.options.get("max_retry") == 0:
            outcomes = [never_retried(o, reason) for o in outcomes]
        duration = now - rec.started_at if rec is not None and rec.started_at is not None else None
        if rec is not None and rec.orphaned:  # nothing will be reported: say so, claim no fate
            log_abandoned(self.log, tasks, job_id, duration)
            return outcomes
        for i, outcome in enumerate(outcomes):
            task = tasks[i] if tasks else None
            if log_finished(
                self.log, task, job_id, outcome, reason=reason, duration=duration, task_log=task_log
            ):
                self.counters["handler_failures"] += 1
        return outcomes

    # -- teardown ----------------------------------------------------------------------------------
    async def shutdown(self, *, wait: float) -> None:
        """Cancel every job (drain), wait up to ``wait`` seconds for their tasks (or hand-off
        futures), cancel what is left, close the executor."""
        tasks = [run.task for run in self.running.values() if run.task is not None]
        for job_id in list(self.running):
            self.executor.cancel(job_id, CancelReason.DRAIN)
        if tasks:
            await asyncio.wait(tasks, timeout=wait)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.executor.close(0.0)
