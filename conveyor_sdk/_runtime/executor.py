"""ProcessExecutor: run jobs in pools of child processes (the worker core's ``executor=``).

Contract (on top of conveyor_sdk._worker.executor):

* Children are spawned by :meth:`spawn` (synchronously, before the supervisor
  opens any connection or thread); :meth:`start` waits for every child's
  ``Ready``. During start-up a child that cannot import the app stops the
  runtime (:class:`RuntimeFailure`), never a respawn storm; afterwards it is
  logged and replaced with backoff (see ``fleet.py``).
* ``can_start`` says whether the job's pool has a free child slot (which queue gets it
  is the pool session's quota rule, ``conveyor_sdk._protocol.quota``); ``run`` sends the
  job to the least-loaded child.
* ``cancel`` forwards the reason; a job still running ``kill_grace`` seconds
  later gets its child's process group SIGKILLed: that job's outcome is
  ``RETRY`` ("deadline exceeded" / "canceled by server", ``cancelled=True``),
  the other jobs of that child are ``RELEASED`` (they did nothing wrong).
* A child dying on its own fails its jobs with ``RETRY`` ("worker process
  died: SIGSEGV"), so a poison pill burns its retries and is dead-lettered.
  Replacements start with exponential backoff.
* Recycling (``max_tasks`` / ``max_memory``) and reload start the replacement
  first and retire the old child once the new one is ready; old children
  finish their jobs before exiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from conveyor_sdk._runtime import pipe
from conveyor_sdk._runtime.fleet import ExecutorOptions, Fleet, Pool, RuntimeFailure
from conveyor_sdk._runtime.proc import ChildProc, ChildState, RunningJob, describe_exit
from conveyor_sdk._worker.executor import CancelReason, Job, JobControl, Outcome, OutcomeKind

__all__ = ["ExecutorOptions", "PoolExecutor", "ProcessExecutor", "RuntimeFailure"]

log = logging.getLogger("conveyor.runtime")

_CANCEL_MESSAGES = {
    CancelReason.DEADLINE: "deadline exceeded",
    CancelReason.SERVER_CANCEL: "canceled by server",
    CancelReason.DRAIN: "worker draining",
}


class ProcessExecutor(Fleet):
    """Executor that runs handlers in child processes (see module docstring)."""

    def __repr__(self) -> str:
        return f"<ProcessExecutor children={len(self.children())} running={len(self.running)}>"

    # -- lifecycle -------------------------------------------------------------------
    async def start(self, wakeup: Callable[[], None], pool: str | None = None) -> None:
        """Wait until every child is ready. Raises RuntimeFailure.

        ``wakeup`` is called when ``pool``'s capacity may have freed (``None``: any pool).
        Several sessions (one per pool) may call this; the children start once.
        """
        self._wakeups[pool] = wakeup
        if self._started is None:
            self._started = asyncio.ensure_future(self._start_children())
        await asyncio.shield(self._started)

    async def _start_children(self) -> None:
        if not self.children():
            self.spawn()
        children = self.children()
        self._starting = True
        try:
            for child in children:
                if child.ready is None:
                    await child.attach(self._on_message, self._on_gone)
            ok = await self._await_fresh(children)
        finally:
            self._starting = False
        if self.failure is not None:
            raise self.failure
        if not ok:
            dead = [c for c in children if c.state is ChildState.DEAD]
            if dead:
                why = f"child {dead[0].name} exited during start-up ({describe_exit(dead[0].returncode)})"
            else:
                why = f"children not ready after {self.options.start_timeout:.0f}s"
            raise RuntimeFailure(why)
        if self._tick is None:
            self._tick = asyncio.create_task(self._ticker(), name="conveyor-runtime-tick")

    def for_pool(self, name: str) -> PoolExecutor:
        """The executor one pool's session uses (its own wakeup and drain; children shared)."""
        return PoolExecutor(self, name)

    def can_start(self, job: Job) -> bool:
        pool = self._pool_for(job)
        if self._closing or pool is None or pool.closing:
            return False
        return pool.free() > 0

    def run(self, job: Job, control: JobControl) -> Awaitable[list[Outcome]]:
        """Send the job to the least-loaded child of its pool; the result resolves to its outcomes.

        A plain method (the core's hand-off, see ``Executor.run``): when a child is free the
        RunJob is written before this returns, so the driver can call it in the read turn of
        the Dispatch, before any task of its own runs.
        """
        pool = self._pool_for(job)
        if pool is None:
            done: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
            done.set_result(
                [Outcome(OutcomeKind.RETRY, f"no pool serves queue {job.queue!r}") for _ in job.tasks]
            )
            return done
        child = pool.pick()
        if child is None:  # can_start said yes; tolerate a lost race by waiting for a slot
            self.waiting[job.job_id] = None  # registered now: a cancel while it waits reaches it
            return asyncio.ensure_future(self._run_when_free(job, control, pool))
        return self._hand_to(child, job, control, pool)

    async def _run_when_free(self, job: Job, control: JobControl, pool: Pool) -> list[Outcome]:
        try:
            child = pool.pick()
            while child is None:
                reason = self.waiting.get(job.job_id)
                if reason is not None:  # cancelled before it reached a child: it never runs
                    kind = OutcomeKind.RELEASED if reason is CancelReason.DRAIN else OutcomeKind.RETRY
                    return [Outcome(kind, _CANCEL_MESSAGES[reason], cancelled=True) for _ in job.tasks]
                if self._closing or pool.closing:
                    return [Outcome(OutcomeKind.RELEASED, "worker stopping") for _ in job.tasks]
                await asyncio.sleep(0.01)
                child = pool.pick()
        finally:
            reason = self.waiting.pop(job.job_id, None)
        handed = self._hand_to(child, job, control, pool)
        if reason is not None:  # cancelled in the turn the slot freed: the child gets the cancel too
            self.cancel(job.job_id, reason)
        return await handed

    def _hand_to(
        self, child: ChildProc, job: Job, control: JobControl, pool: Pool
    ) -> asyncio.Future[list[Outcome]]:
        # To an idle child the RunJob leaves first: the child's wake-up then overlaps the
        # bookkeeping below. A child already running jobs gets it with the turn's other frames,
        # in one write (it is awake, reading between jobs). Its JobDone is read on a later loop
        # turn, after ``running`` is registered.
        child.send(pipe.job_to_msg(job), soon=bool(child.jobs))
        clock, loop = self.clock, asyncio.get_running_loop()
        running = RunningJob(job, control, child, loop.create_future(), clock.monotonic())
        running.started_wall = clock.time()
        self.running[job.job_id] = running
        child.jobs[job.job_id] = running
        self.observer.job_started(job, child)
        # Runs before the awaiting task resumes (callbacks keep their order), also on cancel. A
        # JobDone settles the job itself and takes this callback off (see _on_done).
        running.forget = lambda _: self._forget(running, pool)
        running.future.add_done_callback(running.forget)
        return running.future

    def _forget(self, running: RunningJob, pool: Pool) -> None:
        self._release(running)
        self._wakeup(pool.spec.name)

    def _release(self, running: RunningJob) -> None:
        job = running.job
        self.running.pop(job.job_id, None)
        running.child.jobs.pop(job.job_id, None)
        if running.kill_timer is not None:
            running.kill_timer.cancel()
        self._maybe_recycle(running.child)

    def cancel(self, job_id: str, reason: CancelReason) -> None:
        running = self.running.get(job_id)
        if running is None and job_id in self.waiting:
            self.waiting[job_id] = self.waiting[job_id] or reason
            return
        if running is None:
            return
        if running.cancel_reason is None:
            running.cancel_reason = reason
        running.child.send(pipe.CancelJob(job_id, reason.value))
        if running.kill_timer is None:
            grace = self.options.kill_grace
            running.kill_timer = self.clock.call_later(grace, lambda: self._hard_stop(running))

    def _hard_stop(self, running: RunningJob) -> None:
        if running.future.done():
            return
        child = running.child
        reason = running.cancel_reason or CancelReason.DEADLINE
        log.warning(
            "task ignored cancellation (%s) for %.1fs; killing child %s (pid %d)",
            reason.value,
            self.options.kill_grace,
            child.name,
            child.pid,
            extra={"task_id": running.job.job_id},
        )
        running.victim = True
        child.kill(f"killed: task {running.job.job_id} ignored cancellation")

    async def close(self, grace: float) -> None:
        self._closing = True
        for task in list(self._background):  # no respawn, recycle or reload from now on
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self._finish_jobs(list(self.running.values()), grace)
        await self._stop_children(self.children())
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        if self._started is not None and not self._started.done():
            self._started.cancel()

    async def close_pool(self, name: str, grace: float) -> None:
        """One pool's session is done: its jobs finish within ``grace``, then are released.

        The children keep running (the supervisor stops them with :meth:`close`).
        """
        pool = self.pools[name]
        pool.closing = True
        await self._finish_jobs([r for r in self.running.values() if r.child.pool == name], grace)

    async def _finish_jobs(self, jobs: list[RunningJob], grace: float) -> None:
        if jobs:
            await asyncio.wait([r.future for r in jobs], timeout=max(0.0, grace))
        left = [r for r in jobs if not r.future.done()]
        for running in left:
            self.cancel(running.job.job_id, CancelReason.DRAIN)
        if left:
            await asyncio.wait([r.future for r in left], timeout=self.options.kill_grace + 2)

    # -- child events ----------------------------------------------------------------
    def _on_message(self, child: ChildProc, message: pipe.PipeMessage) -> None:
        if isinstance(message, pipe.JobDone):
            self._on_done(child, message)
        elif isinstance(message, pipe.Progress):
            running = self._running_with_task(child, message.task_id)
            if running is not None:
                running.control.report_progress(message.task_id, message.percent, message.message)
        elif isinstance(message, pipe.Beat):
            child.last_beat = self.clock.monotonic()
            child.rss = message.rss
            if child.hung_logged:
                child.hung_logged = False
                log.info("child %s (pid %d) is responsive again", child.name, child.pid)
            self._maybe_recycle(child)
        elif isinstance(message, pipe.MetricsReport):
            self.observer.child_metrics(child, message)
        elif isinstance(message, pipe.Ready):
            self._on_ready(child, message)
        elif isinstance(message, pipe.ImportFailed):
            self._on_import_failed(child, message)
        else:
            log.error("child %s sent an unexpected %s frame", child.name, type(message).__name__)

    def _on_import_failed(self, child: ChildProc, message: pipe.ImportFailed) -> None:
        """Fatal only at start-up; later the last good code keeps serving (see ``Fleet.reload``)."""
        child.load_error, child.load_detail = message.message, message.detail
        what = f"child {child.name} could not load the app: {message.message}"
        if self._starting:
            detail = f"\n{message.detail.rstrip()}" if message.detail else ""
            self._fail(RuntimeFailure(what + detail))
        elif child.purpose != "reload":  # a failed reload is reported once by the fleet
            self.code_broken = True  # the next replacement imports the last good copy
            log.error("%s%s", what, f"\n{message.detail.rstrip()}" if message.detail else "")

    def _running_with_task(self, child: ChildProc, task_id: str) -> RunningJob | None:
        running = child.jobs.get(task_id)
        if running is not None:
            return running
        for candidate in child.jobs.values():
            if any(t.id == task_id for t in candidate.job.tasks):
                return candidate
        return None

    def _on_ready(self, child: ChildProc, message: pipe.Ready) -> None:
        child.types = frozenset(message.types)
        child.sync_types = frozenset(message.sync_types)
        child.last_beat = child.ready_at = self.clock.monotonic()
        self.pools[child.pool].start_failures = 0
        if child.state is ChildState.STARTING:
            child.state = ChildState.READY
        if child.ready is not None:
            child.ready.set()
        self._wakeup(child.pool)

    def _on_done(self, child: ChildProc, message: pipe.JobDone) -> None:
        running = child.jobs.get(message.job_id)
        if running is None or running.future.done():
            return
        msgs = message.outcomes
        if len(msgs) == 1:  # a single task (most jobs): no comprehension to run
            outcomes = [pipe.outcome_from_msg(msgs[0])]
        else:
            outcomes = [pipe.outcome_from_msg(o) for o in msgs]
        if len(outcomes) != len(running.job.tasks):
            msg = f"child returned {len(outcomes)} outcomes for {len(running.job.tasks)} tasks"
            outcomes = [Outcome(OutcomeKind.RETRY, msg) for _ in running.job.tasks]
        child.tasks_done += 1
        self.observer.job_finished(running.job, outcomes, message.duration)
        # Settled here, not by the future's callback: a callback is a loop callback of its own,
        # one per task. The session hears of the freed slot once for the turn's JobDones, at the
        # start of the next turn, as before: ahead of the job's own done callbacks.
        if running.forget is not None:
            running.future.remove_done_callback(running.forget)
        self._release(running)
        self._wakeup_soon(child.pool)
        running.future.set_result(outcomes)

    def _on_gone(self, child: ChildProc) -> None:
        pool = self.pools[child.pool]
        if child in pool.children:
            pool.children.remove(child)
        if child.ready is not None:
            child.ready.set()
        self._fail_jobs(child)
        self.observer.child_exited(child)
        unready_spare = child.purpose in ("reload", "recycle") and not child.ready_at  # its caller decides
        expected = self._closing or self._starting or child.retired or unready_spare
        if not expected:
            self._replace(pool, child)
        self._wakeup(child.pool)

    def _fail_jobs(self, child: ChildProc) -> None:
        died = f"worker process died: {describe_exit(child.returncode)}"
        for running in list(child.jobs.values()):
            if running.future.done():
                continue
            if running.victim:
                reason = running.cancel_reason or CancelReason.DEADLINE
                kind = OutcomeKind.RELEASED if reason is CancelReason.DRAIN else OutcomeKind.RETRY
                outcome = Outcome(kind, _CANCEL_MESSAGES[reason], cancelled=True)
            elif child.kill_note.startswith("killed:"):
                outcome = Outcome(OutcomeKind.RELEASED, f"worker process restarted ({child.kill_note})")
            else:
                outcome = Outcome(OutcomeKind.RETRY, died)
            outcomes = [outcome for _ in running.job.tasks]
            self.observer.job_finished(running.job, outcomes, self.clock.monotonic() - running.started)
            running.future.set_result(outcomes)

    def _pool_for(self, job: Job) -> Pool | None:
        pool = self._queue_pool.get(job.queue)
        if pool is None and len(self.pools) == 1:
            return next(iter(self.pools.values()))
        return pool


class PoolExecutor:
    """One pool's view of a :class:`ProcessExecutor`: what that pool's session (Worker) is given.

    Jobs go to the pool's own children; ``start`` registers this pool's wakeup (the
    children start once for all pools); ``close`` drains only this pool's jobs.
    """

    def __init__(self, fleet: ProcessExecutor, pool: str) -> None:
        self.fleet = fleet
        self.pool = pool
        # The fleet's own bound methods, not a call through this view: both run between a
        # Dispatch's bytes and its RunJob write, where every extra Python frame costs most
        # (after an idle spell the code is out of the CPU's caches). Same behaviour: the
        # fleet picks the pool by the job's queue either way.
        self.can_start = fleet.can_start  # type: ignore[method-assign]  # see above
        self.run = fleet.run  # type: ignore[method-assign]  # see above

    def __repr__(self) -> str:
        return f"<PoolExecutor {self.pool} of {self.fleet!r}>"

    async def start(self, wakeup: Callable[[], None]) -> None:
        await self.fleet.start(wakeup, self.pool)

    def can_start(self, job: Job) -> bool:
        return self.fleet.can_start(job)

    def run(self, job: Job, control: JobControl) -> Awaitable[list[Outcome]]:
        return self.fleet.run(job, control)

    def cancel(self, job_id: str, reason: CancelReason) -> None:
        self.fleet.cancel(job_id, reason)

    async def close(self, grace: float) -> None:
        await self.fleet.close_pool(self.pool, grace)
