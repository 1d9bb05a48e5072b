"""ProcessExecutor: run jobs in pools of child processes (the worker core's ``executor=``).

Contract (on top of conveyor_sdk._worker.executor):

* Children are spawned by :meth:`spawn` (synchronously, before the supervisor
  opens any connection or thread); :meth:`start` waits for every child's
  ``Ready``. A child that cannot import the app stops the runtime
  (:class:`RuntimeFailure`), never a respawn storm.
* ``can_start`` asks the job's pool for a free slot that the weighted
  :class:`SlotBook` allows; ``run`` sends the job to the least-loaded child.
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
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from conveyor_sdk._runtime import pipe
from conveyor_sdk._runtime.observe import NullObserver, Observer
from conveyor_sdk._runtime.pools import PoolSpec, SlotBook
from conveyor_sdk._runtime.proc import ChildArgs, ChildProc, ChildState, RunningJob, describe_exit
from conveyor_sdk._worker.executor import CancelReason, Job, JobControl, Outcome, OutcomeKind

__all__ = ["ExecutorOptions", "ProcessExecutor", "RuntimeFailure"]

log = logging.getLogger("conveyor.runtime")

_CANCEL_MESSAGES = {
    CancelReason.DEADLINE: "deadline exceeded",
    CancelReason.SERVER_CANCEL: "canceled by server",
    CancelReason.DRAIN: "worker draining",
}


class RuntimeFailure(Exception):
    """The runtime cannot go on (children fail to load the app, or keep dying at start)."""


@dataclass(frozen=True, slots=True)
class ExecutorOptions:
    """Tunables of the process executor (seconds unless noted)."""

    kill_grace: float = 2.0
    hung_after: float = 5.0
    max_tasks_per_child: int = 0
    max_memory_mb: int = 0
    start_timeout: float = 60.0
    respawn_base: float = 0.2
    respawn_max: float = 10.0
    max_start_failures: int = 5
    weights: tuple[tuple[str, int], ...] = ()


class _Pool:
    def __init__(self, spec: PoolSpec, weights: dict[str, int], capacity: int) -> None:
        self.spec = spec
        self.children: list[ChildProc] = []
        self.book = SlotBook({q: weights.get(q, 1) for q in spec.queues}, spec.processes * capacity)
        self.start_failures = 0
        self.crashes: list[float] = []

    def active(self) -> list[ChildProc]:
        return [c for c in self.children if c.state is ChildState.READY]

    def free(self) -> int:
        return sum(c.free for c in self.children)

    def pick(self) -> ChildProc | None:
        best: ChildProc | None = None
        for child in self.children:
            if child.free and (best is None or child.free > best.free):
                best = child
        return best


class ProcessExecutor:
    """Executor that runs handlers in child processes (see module docstring)."""

    def __init__(
        self,
        child_args: ChildArgs,
        pools: Iterable[PoolSpec],
        options: ExecutorOptions | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.child_args = child_args
        self.options = options or ExecutorOptions()
        self.observer: Observer = observer or NullObserver()
        weights = dict(self.options.weights)
        self.pools = {p.name: _Pool(p, weights, child_args.capacity) for p in pools}
        self._queue_pool = {q: pool for pool in self.pools.values() for q in pool.spec.queues}
        self.running: dict[str, RunningJob] = {}
        self._wakeup: Callable[[], None] = lambda: None
        self._next_index = 0
        self._generation = 0
        self._closing = False
        self._recycling: ChildProc | None = None
        self._tick: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.failure: RuntimeFailure | None = None
        self.on_failure: Callable[[RuntimeFailure], None] = lambda exc: None
        self.restarts = 0
        self._starting = False

    def __repr__(self) -> str:
        return f"<ProcessExecutor children={len(self.children())} running={len(self.running)}>"

    # -- lifecycle -------------------------------------------------------------------
    def children(self) -> list[ChildProc]:
        return [c for pool in self.pools.values() for c in pool.children]

    def spawn(self) -> None:
        """Start every pool's children (synchronous; call before opening connections)."""
        for pool in self.pools.values():
            while len(pool.children) < pool.spec.processes:
                self._new_child(pool)

    def _new_child(self, pool: _Pool, purpose: str = "start") -> ChildProc:
        child = ChildProc(self._next_index, pool.spec.name, self._generation, self.child_args)
        child.purpose = purpose
        self._next_index += 1
        cap = self.options.max_tasks_per_child
        child.recycle_at = cap + random.randint(0, cap // 10) if cap else 0
        child.spawn()
        pool.children.append(child)
        self.observer.child_started(child)
        return child

    async def start(self, wakeup: Callable[[], None]) -> None:
        """Wait until every child is ready. Raises RuntimeFailure."""
        self._wakeup = wakeup
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

    def can_start(self, job: Job) -> bool:
        pool = self._pool_for(job)
        if self._closing or pool is None:
            return False
        if pool.book.allows(job.queue, pool.free(), time.monotonic()):
            return True
        pool.book.refused(job.queue, job.job_id, time.monotonic())
        return False

    async def run(self, job: Job, control: JobControl) -> list[Outcome]:
        pool = self._pool_for(job)
        if pool is None:
            return [Outcome(OutcomeKind.RETRY, f"no pool serves queue {job.queue!r}") for _ in job.tasks]
        child = pool.pick()
        while child is None:  # can_start said yes; tolerate a lost race by waiting for a slot
            if self._closing:
                return [Outcome(OutcomeKind.RELEASED, "worker stopping") for _ in job.tasks]
            await asyncio.sleep(0.01)
            child = pool.pick()
        loop = asyncio.get_running_loop()
        running = RunningJob(job, control, child, loop.create_future(), time.monotonic())
        self.running[job.job_id] = running
        child.jobs[job.job_id] = running
        pool.book.acquire(job.queue, job.job_id)
        self.observer.job_started(job, child)
        child.send(pipe.job_to_msg(job))
        try:
            outcomes = await running.future
        finally:
            self._forget(running, pool)
        return outcomes

    def _forget(self, running: RunningJob, pool: _Pool) -> None:
        job = running.job
        self.running.pop(job.job_id, None)
        running.child.jobs.pop(job.job_id, None)
        if running.kill_timer is not None:
            running.kill_timer.cancel()
        pool.book.release(job.queue)
        self._maybe_recycle(running.child)
        self._wakeup()

    def cancel(self, job_id: str, reason: CancelReason) -> None:
        running = self.running.get(job_id)
        if running is None:
            for pool in self.pools.values():
                pool.book.forget(job_id)
            return
        if running.cancel_reason is None:
            running.cancel_reason = reason
        running.child.send(pipe.CancelJob(job_id, reason.value))
        if running.kill_timer is None:
            loop = asyncio.get_running_loop()
            running.kill_timer = loop.call_later(self.options.kill_grace, self._hard_stop, running)

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
        if self.running:
            pending = [r.future for r in self.running.values()]
            await asyncio.wait(pending, timeout=max(0.0, grace))
        for running in list(self.running.values()):
            self.cancel(running.job.job_id, CancelReason.DRAIN)
        if self.running:
            await asyncio.wait([r.future for r in self.running.values()], timeout=self.options.kill_grace + 2)
        await self._stop_children(self.children())
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None

    def abort(self, why: str) -> None:
        """Fast stop: kill every child now; their jobs are RELEASED (no retry burned)."""
        self._closing = True
        for child in self.children():
            child.kill(f"killed: {why}")

    async def _stop_children(self, children: list[ChildProc]) -> None:
        for child in children:
            if child.state is not ChildState.DEAD:
                child.retired = True
                child.send(pipe.Stop())
        if not await _wait_gone(children, 5.0):
            for child in children:
                if child.state is not ChildState.DEAD:
                    child.kill("did not stop in time")
            await _wait_gone(children, 3.0)
        for child in children:
            if child.popen is not None and child.popen.poll() is None:
                child.popen.kill()
                child.popen.wait(5)

    # -- reload and recycling --------------------------------------------------------
    async def reload(self) -> bool:
        """Start a fresh generation; retire the old one once all new children are ready."""
        if self._closing:
            return False
        self._generation += 1
        old = [c for c in self.children() if c.state in (ChildState.READY, ChildState.STARTING)]
        fresh = [
            self._new_child(pool, "reload")
            for pool in self.pools.values()
            for _ in range(pool.spec.processes)
        ]
        for child in fresh:
            await child.attach(self._on_message, self._on_gone)
        ok = await self._await_fresh(fresh)
        if not ok:
            for child in fresh:
                child.kill("reload failed")
            log.error("reload failed: the new code did not load; old children keep serving")
            return False
        for child in old:
            self._retire(child)
        log.info("reloaded: %d fresh children serving, %d old ones finishing", len(fresh), len(old))
        self._wakeup()
        return True

    async def _await_fresh(self, fresh: list[ChildProc]) -> bool:
        deadline = time.monotonic() + self.options.start_timeout
        while time.monotonic() < deadline:
            if any(c.state is ChildState.DEAD for c in fresh):
                return False
            if all(c.state is ChildState.READY for c in fresh):
                return True
            await asyncio.sleep(0.02)
        return False

    def _retire(self, child: ChildProc) -> None:
        if child.state in (ChildState.DEAD, ChildState.RETIRING):
            return
        child.state = ChildState.RETIRING
        child.retired = True
        child.send(pipe.Stop())

    def _maybe_recycle(self, child: ChildProc) -> None:
        if self._closing or self._recycling is not None or child.state is not ChildState.READY:
            return
        over_tasks = child.recycle_at and child.tasks_done >= child.recycle_at
        limit_mb = self.options.max_memory_mb
        over_memory = limit_mb and child.rss > limit_mb * 1024 * 1024
        if not (over_tasks or over_memory):
            return
        why = f"{child.tasks_done} tasks" if over_tasks else f"RSS {child.rss // (1 << 20)} MiB"
        self._recycling = child
        task = asyncio.create_task(self._recycle(child, why))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _recycle(self, child: ChildProc, why: str) -> None:
        try:
            pool = self.pools[child.pool]
            log.info("recycling child %s (pid %d) after %s", child.name, child.pid, why)
            fresh = self._new_child(pool, "recycle")
            await fresh.attach(self._on_message, self._on_gone)
            if await self._await_fresh([fresh]):
                self._retire(child)
                self.observer.child_restarted(child, "recycled")
                self._wakeup()
        finally:
            self._recycling = None

    # -- child events ----------------------------------------------------------------
    def _on_message(self, child: ChildProc, message: pipe.PipeMessage) -> None:
        if isinstance(message, pipe.JobDone):
            self._on_done(child, message)
        elif isinstance(message, pipe.Progress):
            running = self._running_with_task(child, message.task_id)
            if running is not None:
                running.control.report_progress(message.task_id, message.percent, message.message)
        elif isinstance(message, pipe.Beat):
            child.last_beat = time.monotonic()
            child.rss = message.rss
            if child.hung_logged:
                child.hung_logged = False
                log.info("child %s (pid %d) is responsive again", child.name, child.pid)
            self._maybe_recycle(child)
        elif isinstance(message, pipe.Ready):
            self._on_ready(child, message)
        elif isinstance(message, pipe.ImportFailed):
            what = f"child {child.name} could not load the app: {message.message}"
            if child.purpose == "reload":
                log.error("%s", what)
            else:
                self._fail(RuntimeFailure(what))
        else:
            log.error("child %s sent an unexpected %s frame", child.name, type(message).__name__)

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
        child.last_beat = child.ready_at = time.monotonic()
        self.pools[child.pool].start_failures = 0
        if child.state is ChildState.STARTING:
            child.state = ChildState.READY
        if child.ready is not None:
            child.ready.set()
        self._wakeup()

    def _on_done(self, child: ChildProc, message: pipe.JobDone) -> None:
        running = child.jobs.get(message.job_id)
        if running is None or running.future.done():
            return
        outcomes = [pipe.outcome_from_msg(o) for o in message.outcomes]
        if len(outcomes) != len(running.job.tasks):
            msg = f"child returned {len(outcomes)} outcomes for {len(running.job.tasks)} tasks"
            outcomes = [Outcome(OutcomeKind.RETRY, msg) for _ in running.job.tasks]
        child.tasks_done += 1
        self.observer.job_finished(running.job, outcomes, message.duration)
        running.future.set_result(outcomes)

    def _on_gone(self, child: ChildProc) -> None:
        pool = self.pools[child.pool]
        if child in pool.children:
            pool.children.remove(child)
        if child.ready is not None:
            child.ready.set()
        self._fail_jobs(child)
        self.observer.child_exited(child)
        expected = self._closing or self._starting or child.retired or child.kill_note == "reload failed"
        if not expected:
            self._replace(pool, child)
        self._wakeup()

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
            self.observer.job_finished(running.job, outcomes, time.monotonic() - running.started)
            running.future.set_result(outcomes)

    def _replace(self, pool: _Pool, child: ChildProc) -> None:
        if self._closing or self.failure is not None:
            return
        self.restarts += 1
        now = time.monotonic()
        if child.ready_at == 0.0:
            pool.start_failures += 1
        if pool.start_failures >= self.options.max_start_failures:
            how = describe_exit(child.returncode)
            msg = f"children of pool {pool.spec.name!r} keep dying at start-up ({how})"
            self._fail(RuntimeFailure(msg))
            return
        if not child.kill_note:
            log.warning("child %s (pid %d) died: %s", child.name, child.pid, describe_exit(child.returncode))
        self.observer.child_restarted(child, child.kill_note or describe_exit(child.returncode))
        pool.crashes = [t for t in pool.crashes if now - t < 10.0] + [now]
        strikes = max(pool.start_failures, len(pool.crashes) - 1)
        delay = 0.0
        if strikes:
            delay = min(self.options.respawn_max, self.options.respawn_base * 2 ** (strikes - 1))
            delay *= random.uniform(0.5, 1.0)
        task = asyncio.create_task(self._respawn(pool, delay))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _respawn(self, pool: _Pool, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        if self._closing or self.failure is not None:
            return
        fresh = self._new_child(pool, "respawn")
        await fresh.attach(self._on_message, self._on_gone)

    def _fail(self, failure: RuntimeFailure) -> None:
        if self.failure is None:
            self.failure = failure
            log.error("%s", failure)
            self.on_failure(failure)

    # -- periodic checks -------------------------------------------------------------
    async def _ticker(self) -> None:
        interval = max(0.05, min(1.0, self.child_args.beat))
        while True:
            await asyncio.sleep(interval)
            self.check(time.monotonic(), time.time())

    def check(self, now: float, wall: float) -> None:
        """Poll exits (no pidfd), log hung children, kill hung ones past a task's deadline."""
        for child in self.children():
            child.poll()
            if not child.jobs or child.state is ChildState.DEAD:
                continue
            silent = now - child.last_beat
            if silent < self.options.hung_after:
                continue
            ids = ", ".join(sorted(child.jobs))
            if not child.hung_logged:
                child.hung_logged = True
                log.warning(
                    "child %s (pid %d) unresponsive for %.1fs while running %s",
                    child.name,
                    child.pid,
                    silent,
                    ids,
                    extra={"task_id": ids},
                )
            grace = self.options.kill_grace
            late = [
                r for r in child.jobs.values() if r.job.deadline is not None and r.job.deadline + grace < wall
            ]
            for running in late:
                running.victim = True
            if late:
                child.kill(f"killed: hung past the deadline of {late[0].job.job_id}")

    def _pool_for(self, job: Job) -> _Pool | None:
        pool = self._queue_pool.get(job.queue)
        if pool is None and len(self.pools) == 1:
            return next(iter(self.pools.values()))
        return pool

    def statistics(self) -> dict[str, object]:
        """Snapshot for logs, the live view and /healthz."""
        return {
            "children": [
                {
                    "name": c.name,
                    "pid": c.pid,
                    "state": c.state.value,
                    "running": len(c.jobs),
                    "done": c.tasks_done,
                    "rss": c.rss,
                }
                for c in self.children()
            ],
            "running": len(self.running),
            "restarts": self.restarts,
            "waiting": {name: pool.book.waiting() for name, pool in self.pools.items()},
        }


async def _wait_gone(children: list[ChildProc], seconds: float) -> bool:
    """Wait until every child is gone; False on timeout."""
    waits = [asyncio.ensure_future(c.gone.wait()) for c in children if c.state is not ChildState.DEAD]
    if not waits:
        return True
    _, pending = await asyncio.wait(waits, timeout=seconds)
    for fut in pending:
        fut.cancel()
    return not pending
