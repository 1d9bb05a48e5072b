"""The child-process fleet: spawning, replacement, recycling, reload and health checks.

:class:`Fleet` owns the pools of :class:`ChildProc` and everything about their
life that is not a job: replacements after a crash (with backoff; a child that
cannot load the app is fatal only during start-up, later it is retried with the
last good copy of the code while the code on disk is broken), recycling after
``max_tasks_per_child`` / ``max_memory_mb`` (replacement ready first, one child
at a time, thresholds jittered), reload (a fresh generation, then the old one
retires and finishes its jobs; if the fresh one does not load, the old one keeps
serving and the next reload tries again), and the periodic health check (a child whose
beats stop while it runs jobs is logged with those task ids and killed once a
job's deadline has passed). :class:`ProcessExecutor` adds the job side.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from conveyor_sdk._protocol.types import CancelReason
from conveyor_sdk._runtime import pipe
from conveyor_sdk._runtime.observe import NullObserver, Observer
from conveyor_sdk._runtime.pools import PoolSpec
from conveyor_sdk._runtime.proc import ChildArgs, ChildProc, ChildState, RunningJob, describe_exit
from conveyor_sdk._runtime.reload import discard_snapshot, take_snapshot
from conveyor_sdk._transport.clock import Clock, SystemClock

__all__ = ["ExecutorOptions", "Fleet", "Pool", "RuntimeFailure"]

log = logging.getLogger("conveyor.runtime")


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


class Pool:
    """One pool's children (its session's machine shares their slots among its queues by weight).

    ``capacity`` (processes x slots per child) is the concurrency its session declares.
    """

    def __init__(self, spec: PoolSpec, weights: dict[str, int], capacity: int) -> None:
        self.spec = spec
        self.capacity = spec.processes * capacity
        self.weights = {q: weights.get(q, 1) for q in spec.queues}
        self.children: list[ChildProc] = []
        self.start_failures = 0
        self.crashes: list[float] = []
        self.closing = False  # its session drained: start nothing more here
        self._turn = 0  # round-robin cursor for ties in pick()

    def active(self) -> list[ChildProc]:
        return [c for c in self.children if c.state is ChildState.READY]

    def free(self) -> int:
        total = 0  # a plain loop: asked for every delivery (can_start), a generator costs more
        for child in self.children:
            total += child.free
        return total

    def pick(self) -> ChildProc | None:
        """The least-loaded ready child (most free slots); ties go round-robin."""
        children = self.children
        n = len(children)
        best: ChildProc | None = None
        best_at = best_free = 0
        for step in range(n):
            at = (self._turn + step) % n
            child = children[at]
            free = child.free  # a property: read once per child
            if free > best_free:
                best, best_at, best_free = child, at, free
        if best is not None:
            self._turn = best_at + 1
        return best


class Fleet:
    """Child processes grouped in pools (see the module docstring)."""

    def __init__(
        self,
        child_args: ChildArgs,
        pools: Iterable[PoolSpec],
        options: ExecutorOptions | None = None,
        observer: Observer | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()  # tests pass a ManualClock
        self.child_args = child_args
        self.options = options or ExecutorOptions()
        self.observer: Observer = observer or NullObserver()
        weights = dict(self.options.weights)
        self.pools = {p.name: Pool(p, weights, child_args.capacity) for p in pools}
        self._queue_pool = {q: pool for pool in self.pools.values() for q in pool.spec.queues}
        self.running: dict[str, RunningJob] = {}
        # Jobs ``run`` accepted while no child had a free slot: job id -> a cancel that came meanwhile.
        self.waiting: dict[str, CancelReason | None] = {}
        self._wakeups: dict[str | None, Callable[[], None]] = {}  # pool name (None = every pool) -> wakeup
        self._wake_soon: dict[str, None] = {}  # pools to wake at the next loop turn (an ordered set)
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
        self._started: asyncio.Future[None] | None = None
        self._reload_lock: asyncio.Lock | None = None
        self._reload_again = False
        self.good_code: str | None = None  # copy of the .py files the serving generation loaded
        self.code_broken = False  # the code on disk failed to load since the last good generation

    def children(self) -> list[ChildProc]:
        return [c for pool in self.pools.values() for c in pool.children]

    def _wakeup(self, pool: str | None = None) -> None:
        """Tell the session(s) that capacity may have freed: ``pool``'s, or every one."""
        if pool is None:
            for wake in list(self._wakeups.values()):
                wake()
            return
        for key in (pool, None):
            one = self._wakeups.get(key)
            if one is not None:
                one()

    def _wakeup_soon(self, pool: str) -> None:
        """:meth:`_wakeup` for ``pool`` at the next loop turn, once however many jobs of this turn ask."""
        if not self._wake_soon:
            asyncio.get_running_loop().call_soon(self._wake_pending)
        self._wake_soon[pool] = None

    def _wake_pending(self) -> None:
        pools, self._wake_soon = self._wake_soon, {}
        for pool in pools:
            self._wakeup(pool)

    def spawn(self) -> None:
        """Start every pool's children (synchronous; call before opening connections)."""
        if self.child_args.source_root and self.good_code is None:
            self.good_code = take_snapshot(self.child_args.source_root)
        for pool in self.pools.values():
            while len(pool.children) < pool.spec.processes:
                self._new_child(pool)

    def _new_child(self, pool: Pool, purpose: str = "start") -> ChildProc:
        args = self.child_args
        if self.code_broken and self.good_code and purpose != "reload":
            args = replace(args, import_root=self.good_code)  # the code on disk is broken: last good copy
        child = ChildProc(self._next_index, pool.spec.name, self._generation, args)
        child.purpose = purpose
        self._next_index += 1
        cap = self.options.max_tasks_per_child
        child.recycle_at = cap + random.randint(0, cap // 10) if cap else 0
        child.spawn(self.clock.monotonic())
        pool.children.append(child)
        self.observer.child_started(child)
        return child

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
        await asyncio.gather(*(c.output_drained(2.0) for c in children))  # their last lines too

    async def reload(self) -> bool:
        """Start a fresh generation; retire the old one once all new children are ready.

        Reloads run one at a time; requests arriving meanwhile collapse into one more reload.
        """
        if self._reload_lock is None:
            self._reload_lock = asyncio.Lock()
        if self._reload_lock.locked():
            self._reload_again = True
            return True
        async with self._reload_lock:
            ok = await self._reload_once()
            while self._reload_again and not self._closing:
                self._reload_again = False
                ok = await self._reload_once()
        return ok

    async def _reload_once(self) -> bool:
        if self._closing:
            return False
        self._generation += 1
        root = self.child_args.source_root
        copy = await asyncio.to_thread(take_snapshot, root) if root else None
        fresh = [
            self._new_child(pool, "reload")
            for pool in self.pools.values()
            for _ in range(pool.spec.processes)
        ]
        for child in fresh:
            await child.attach(self._on_message, self._on_gone)
        if not await self._await_fresh(fresh):
            self._reload_failed(fresh, copy)
            return False
        old = [c for c in self.children() if c not in fresh and c.state is not ChildState.DEAD]
        for child in old:
            self._retire(child)
        discard_snapshot(self.good_code)
        self.good_code, self.code_broken = copy, False
        log.info("reloaded: %d fresh children serving, %d old ones finishing", len(fresh), len(old))
        self._wakeup()
        return True

    def _reload_failed(self, fresh: list[ChildProc], copy: str | None) -> None:
        """The new code did not load: drop the fresh children; the old ones keep serving."""
        for child in fresh:
            self._retire(child)  # a fresh child that is already ready finishes what it took
        discard_snapshot(copy)
        failed = next((c for c in fresh if c.load_error), None)
        if failed is not None:
            self.code_broken = True
            why = failed.load_error + (f"\n{failed.load_detail.rstrip()}" if failed.load_detail else "")
        else:
            dead = next((c for c in fresh if c.state is ChildState.DEAD), None)
            why = f"a new child exited ({describe_exit(dead.returncode)})" if dead else "not ready in time"
        log.error(
            "reload failed: the new code did not load; old children keep serving "
            "(the next change or SIGHUP tries again): %s",
            why,
        )

    async def _await_fresh(self, fresh: list[ChildProc]) -> bool:
        deadline = self.clock.monotonic() + self.options.start_timeout
        while self.clock.monotonic() < deadline:
            if any(c.state is ChildState.DEAD for c in fresh):
                return False
            if all(c.state is ChildState.READY for c in fresh):
                return True
            await asyncio.sleep(0.02)
        return False

    def _retire(self, child: ChildProc) -> None:
        if child.state in (ChildState.DEAD, ChildState.RETIRING):
            return
        child.retired = True
        if child.state is ChildState.STARTING:  # no job yet; it may not even read its pipe yet
            child.kill("superseded")
            return
        child.state = ChildState.RETIRING
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
            if self._closing:
                return
            pool = self.pools[child.pool]
            log.info("recycling child %s (pid %d) after %s", child.name, child.pid, why)
            fresh = self._new_child(pool, "recycle")
            await fresh.attach(self._on_message, self._on_gone)
            if await self._await_fresh([fresh]):
                self._retire(child)
                self.observer.child_restarted(child, "recycled")
                self._wakeup(pool.spec.name)
        finally:
            self._recycling = None

    def _replace(self, pool: Pool, child: ChildProc) -> None:
        if self._closing or self.failure is not None:
            return
        self.restarts += 1
        now = self.clock.monotonic()
        if child.ready_at == 0.0:
            pool.start_failures += 1
            if pool.start_failures == self.options.max_start_failures:
                log.error(
                    "children of pool %r keep dying before they are ready (%s); retrying every %.0fs at most",
                    pool.spec.name,
                    child.load_error or describe_exit(child.returncode),
                    self.options.respawn_max,
                )
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

    async def _respawn(self, pool: Pool, delay: float) -> None:
        if delay:
            await self.clock.sleep(delay)
        if self._closing or self.failure is not None:
            return
        fresh = self._new_child(pool, "respawn")
        await fresh.attach(self._on_message, self._on_gone)

    def _fail(self, failure: RuntimeFailure) -> None:
        if self.failure is None:
            self.failure = failure
            log.error("%s", failure)
            self.on_failure(failure)

    def ticking(self) -> bool:
        """False once the periodic check task has died (a bug; /healthz reports it)."""
        return self._tick is None or not self._tick.done()

    async def _ticker(self) -> None:
        interval = max(0.05, min(1.0, self.child_args.beat))
        while True:
            await self.clock.sleep(interval)
            self.check(self.clock.monotonic(), self.clock.time())

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
            late = [r for r in child.jobs.values() if (b := _hard_bound(r)) is not None and b + grace < wall]
            for running in late:
                running.victim = True
            if late:
                child.kill(f"killed: hung past the deadline of {late[0].job.job_id}")

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
        }

    # -- hooks the job side implements ------------------------------------------------
    def _on_message(self, child: ChildProc, message: pipe.PipeMessage) -> None:
        raise NotImplementedError

    def _on_gone(self, child: ChildProc) -> None:
        raise NotImplementedError


def _hard_bound(running: RunningJob) -> float | None:
    """When a hung job must be stopped: its task-owned bounds (deadline, start + timeout).

    Without any, the core's start-time deadline (lease-derived, so a blocked child
    cannot hold a task forever while the heartbeats keep its lease alive).
    """
    bounds = [t.task_deadline for t in running.job.tasks if t.task_deadline is not None]
    bounds += [running.started_wall + t.timeout for t in running.job.tasks if t.timeout]
    return min(bounds) if bounds else running.job.deadline


async def _wait_gone(children: list[ChildProc], seconds: float) -> bool:
    """Wait until every child is gone; False on timeout."""
    waits = [asyncio.ensure_future(c.gone.wait()) for c in children if c.state is not ChildState.DEAD]
    if not waits:
        return True
    _, pending = await asyncio.wait(waits, timeout=seconds)
    for fut in pending:
        fut.cancel()
    return not pending
