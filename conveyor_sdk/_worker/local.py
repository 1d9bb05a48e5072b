"""The default executor: async handlers on the worker's loop, sync handlers in a thread pool.

Cancellation: the job's :class:`CancelSignal` fires; an async handler's coroutine is
also cancelled. A sync handler can only stop cooperatively (``ctx.cancelled``,
``ctx.wait_cancelled``, ``ctx.raise_if_cancelled``): if its thread has not returned
``cancel_grace`` seconds after the signal, the job is reported as cancelled anyway and
the thread is abandoned (logged; Python cannot kill a thread). ``close`` waits for such
threads up to its grace, then stops waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conveyor_sdk._worker.context import CancelSignal
from conveyor_sdk._worker.executor import CancelReason, Job, JobControl, Outcome
from conveyor_sdk._worker.invoke import begin_async, invoke
from conveyor_sdk._worker.outcomes import cancelled_outcome
from conveyor_sdk._worker.registry import Registry

__all__ = ["LocalExecutor"]

log = logging.getLogger("conveyor.worker.executor")


class LocalExecutor:
    """In-process executor (see module docstring). ``threads`` = size of the sync-handler pool."""

    def __init__(self, registry: Registry, *, threads: int, cancel_grace: float = 5.0) -> None:
        self.registry = registry
        self.threads = max(1, threads)
        self.cancel_grace = cancel_grace
        self._pool: ThreadPoolExecutor | None = None
        self._signals: dict[str, CancelSignal] = {}
        self._busy_threads = 0
        self._abandoned = 0
        self._abandoned_futs: set[asyncio.Future[list[Outcome]]] = set()
        self._wakeup: Callable[[], None] = lambda: None
        self._idle: asyncio.Future[None] | None = None  # made by close() while jobs run

    def __repr__(self) -> str:
        return (
            f"<LocalExecutor running={len(self._signals)} threads={self._busy_threads}/{self.threads}"
            f" abandoned={self._abandoned}>"
        )

    async def start(self, wakeup: Callable[[], None]) -> None:
        self._wakeup = wakeup
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="conveyor-handler")

    def can_start(self, job: Job) -> bool:
        spec = self.registry.lookup(job.type)
        if spec is None or spec.is_async:
            return True
        return self._busy_threads + self._abandoned < self.threads

    async def run(self, job: Job, control: JobControl) -> list[Outcome]:
        signal = CancelSignal()
        signals = self._signals
        signals[job.job_id] = signal
        try:
            spec = self.registry.lookup(job.type)
            if spec is None or spec.is_async:  # invoke_async, less one coroutine level
                begun = begin_async(self.registry, job, signal, control.report_progress, spec)
                return begun if isinstance(begun, list) else await begun
            return await self._run_in_thread(job, signal, control)
        finally:
            signals.pop(job.job_id, None)
            if not signals and self._idle is not None and not self._idle.done():
                self._idle.set_result(None)  # close() is waiting for the last job

    async def _run_in_thread(self, job: Job, signal: CancelSignal, control: JobControl) -> list[Outcome]:
        if self._pool is None:
            raise RuntimeError("LocalExecutor.run() before start()")
        loop = asyncio.get_running_loop()
        call = functools.partial(
            invoke, self.registry, job, signal=signal, report_progress=control.report_progress
        )
        self._busy_threads += 1
        fut = loop.run_in_executor(self._pool, call)
        released = [False]

        def release(_: object = None) -> None:
            if not released[0]:
                released[0] = True
                self._busy_threads -= 1
                self._wakeup()

        fut.add_done_callback(release)
        waiter = asyncio.ensure_future(signal.wait_async())
        try:
            pending: set[asyncio.Future[Any]] = {fut, waiter}
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if not fut.done():
                return await self._after_cancel(job, fut, release)
            return fut.result()
        finally:
            waiter.cancel()

    async def _after_cancel(
        self, job: Job, fut: asyncio.Future[list[Outcome]], release: Callable[[], None]
    ) -> list[Outcome]:
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.cancel_grace)
        except TimeoutError:
            log.warning(
                "sync handler for %s did not stop within %.1fs of cancellation; abandoning its thread",
                job.job_id,
                self.cancel_grace,
            )
            self._abandoned += 1
            self._abandoned_futs.add(fut)
            fut.add_done_callback(self._forget_abandoned)
            return [cancelled_outcome() for _ in job.tasks]

    def _forget_abandoned(self, fut: asyncio.Future[list[Outcome]]) -> None:
        self._abandoned -= 1
        self._abandoned_futs.discard(fut)
        self._wakeup()

    def _idle_future(self) -> asyncio.Future[None]:
        """Resolved when the last running job ends (no per-job cost: only close() waits)."""
        if self._idle is None or self._idle.done():
            self._idle = asyncio.get_running_loop().create_future()
        return self._idle

    def cancel(self, job_id: str, reason: CancelReason) -> None:
        signal = self._signals.get(job_id)
        if signal is not None:
            signal.set(reason)

    async def close(self, grace: float) -> None:
        """Wait up to ``grace`` s for running jobs, cancel the rest (DRAIN), then shut the pool.

        Threads of sync handlers that ignore cancellation cannot be stopped; the pool is
        then shut down without waiting for them (they were already reported cancelled).
        """
        if self._signals:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._idle_future()), grace)
        for signal in list(self._signals.values()):
            signal.set(CancelReason.DRAIN)
        if self._signals:
            try:
                await asyncio.wait_for(asyncio.shield(self._idle_future()), self.cancel_grace)
            except TimeoutError:
                log.warning("%d job(s) still running after close; abandoning them", len(self._signals))
        if self._abandoned_futs:  # threads of handlers that ignored cancellation
            await asyncio.wait(set(self._abandoned_futs), timeout=max(grace, self.cancel_grace))
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=not self._abandoned, cancel_futures=True)
