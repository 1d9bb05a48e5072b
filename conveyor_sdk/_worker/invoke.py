"""Run one :class:`Job` through decode + middleware + handler and map the outcomes.

Two forms, same semantics (the result is always one :class:`Outcome` per task, in job
order; neither raises for a handler failure):

* :func:`invoke` (sync): for thread pools and child processes. An async handler is run
  with ``asyncio.run`` in the calling thread (which must have no running loop).
* :func:`invoke_async`: for the worker loop. An async handler runs in the current task
  and is also force-cancelled (``Task.cancel``) when the signal fires; a sync handler is
  run in the loop's default thread pool.

Unknown task types get RETRY ("no handler registered for task type ..."), so another
worker with the handler can pick the task up later; payload decode failures get
SKIP_RETRY. Cancellation: when the job's signal fired and the handler then raised
(anything, including ``TaskCancelled``/``CancelledError``), the outcome is
``cancelled=True``; a handler that completes despite the signal reports its real outcome.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from conveyor_sdk._worker.context import CancelSignal, ProgressSink, TaskContext
from conveyor_sdk._worker.executor import Job, Outcome, OutcomeKind, TaskData
from conveyor_sdk._worker.outcomes import (
    cancelled_outcome,
    outcome_for_batch_return,
    outcome_for_exception,
    outcome_for_return,
)
from conveyor_sdk._worker.registry import HandlerSpec, Middleware, Registry

__all__ = ["begin_async", "invoke", "invoke_async", "make_context"]


@dataclass(slots=True)
class _Prepared:
    """A job after lookup and decoding: what to call and how to map the result."""

    spec: HandlerSpec
    ctx: TaskContext
    arg: Any  # decoded single task, or list of decoded members
    live: list[TaskData]  # members passed to the handler (decode succeeded)
    fixed: dict[str, Outcome]  # members already decided (decode failures)


def make_context(
    job: Job, signal: CancelSignal | None = None, report_progress: ProgressSink | None = None
) -> TaskContext:
    """Build the ctx a handler sees for ``job``."""
    return TaskContext(job, signal, report_progress)


def _decode_error(task: TaskData, exc: BaseException) -> Outcome:
    ct = task.content_type or "no content type"
    msg = f"cannot decode payload of task {task.id} ({ct}): {type(exc).__name__}: {exc}"
    return Outcome(OutcomeKind.SKIP_RETRY, error_msg=msg)


def _prepare(
    registry: Registry, ctx: TaskContext, spec: HandlerSpec | None = None
) -> _Prepared | list[Outcome]:
    job = ctx.job
    if spec is None:
        spec = registry.lookup(job.type)
    if spec is None:
        msg = f"no handler registered for task type {job.type!r}"
        return [Outcome(OutcomeKind.RETRY, error_msg=msg) for _ in job.tasks]
    if not spec.batch and len(job.tasks) != 1:
        msg = f"task type {job.type!r} has no batch handler"
        return [Outcome(OutcomeKind.RETRY, error_msg=msg) for _ in job.tasks]
    decode = spec.decode
    if decode is None and not spec.batch:  # the usual job: one task, handed over as it is
        task = job.tasks[0]
        return _Prepared(spec, ctx, task, [task], {})
    fixed: dict[str, Outcome] = {}
    live: list[TaskData] = []
    decoded: list[Any] = []
    for task in job.tasks:
        try:
            decoded.append(task if decode is None else decode(task))
            live.append(task)
        except Exception as exc:
            fixed[task.id] = _decode_error(task, exc)
    if not live:
        return [fixed[t.id] for t in job.tasks]
    arg = decoded if spec.batch else decoded[0]
    return _Prepared(spec, ctx, arg, live, fixed)


def _map_success(prep: _Prepared, value: Any) -> list[Outcome]:
    if prep.spec.batch:
        mapped = dict(zip((t.id for t in prep.live), outcome_for_batch_return(value, prep.live), strict=True))
    else:
        mapped = {prep.live[0].id: outcome_for_return(value)}
    mapped.update(prep.fixed)
    return [mapped[t.id] for t in prep.ctx.job.tasks]


def _map_failure(prep: _Prepared, exc: BaseException) -> list[Outcome]:
    outcome = cancelled_outcome() if prep.ctx.cancelled else outcome_for_exception(exc)
    return [prep.fixed.get(t.id, outcome) for t in prep.ctx.job.tasks]


def _run_before(mws: Sequence[Middleware], ctx: TaskContext, entered: list[Middleware]) -> None:
    for mw in mws:
        mw.before_task(ctx)
        entered.append(mw)


def _run_after(
    entered: list[Middleware], ctx: TaskContext, result: Any, error: BaseException | None
) -> BaseException | None:
    for mw in reversed(entered):
        try:
            mw.after_task(ctx, result, error)
        except Exception as exc:
            error = error or exc
    return error


def invoke(
    registry: Registry,
    job: Job,
    *,
    signal: CancelSignal | None = None,
    report_progress: ProgressSink | None = None,
) -> list[Outcome]:
    """Run ``job`` synchronously in this thread; one outcome per task, in order."""
    ctx = make_context(job, signal, report_progress)
    prep = _prepare(registry, ctx)
    if isinstance(prep, list):
        return prep
    if prep.spec.is_async:
        return asyncio.run(_invoke_prepared_async(registry, prep))
    entered: list[Middleware] = []
    result: Any = None
    error: BaseException | None = None
    try:
        _run_before(registry.middlewares, ctx, entered)
        result = prep.spec.fn(prep.arg, ctx)
        if inspect.iscoroutine(result):  # a "sync" callable that returned a coroutine: run it here
            result = asyncio.run(result)
    except BaseException as exc:  # every failure, even SystemExit, must still produce a Result
        error = exc
    error = _run_after(entered, ctx, result, error)
    return _map_success(prep, result) if error is None else _map_failure(prep, error)


async def invoke_async(
    registry: Registry,
    job: Job,
    *,
    signal: CancelSignal | None = None,
    report_progress: ProgressSink | None = None,
) -> list[Outcome]:
    """Run ``job`` from a coroutine; one outcome per task, in order."""
    begun = begin_async(registry, job, signal, report_progress)
    return begun if isinstance(begun, list) else await begun


def begin_async(
    registry: Registry,
    job: Job,
    signal: CancelSignal | None,
    report_progress: ProgressSink | None,
    spec: HandlerSpec | None = None,
) -> list[Outcome] | Coroutine[Any, Any, list[Outcome]]:
    """:func:`invoke_async` up to the handler: the outcomes when no handler runs, else what to await.

    For an executor already in a coroutine: awaiting the result directly keeps one coroutine
    out of the chain every resumption of the handler goes through. ``spec``: the registry's
    spec for ``job.type`` when the caller looked it up already.
    """
    ctx = TaskContext(job, signal, report_progress)
    prep = _prepare(registry, ctx, spec)
    if isinstance(prep, list):
        return prep
    if not prep.spec.is_async:
        return _invoke_in_default_pool(registry, job, ctx.signal, report_progress)
    return _invoke_prepared_async(registry, prep, ctx.signal if signal is None else signal)


async def _invoke_in_default_pool(
    registry: Registry, job: Job, signal: CancelSignal, report_progress: ProgressSink | None
) -> list[Outcome]:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        None, lambda: invoke(registry, job, signal=signal, report_progress=report_progress)
    )


def _arm_cancel(signal: CancelSignal) -> Callable[[], None]:
    """Make the signal cancel the current task while the handler runs; returns the disarm function."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    if task is None:
        return _nothing
    if signal.arm(loop, task):  # the usual case: one handler per signal
        return functools.partial(signal.disarm, task)
    armed = [True]  # another task holds the signal's slot: a callback of our own

    def fire() -> None:
        if armed[0]:
            task.cancel()

    signal.add_callback(loop, fire)

    def disarm() -> None:
        armed[0] = False
        signal.remove_callback(fire)

    return disarm


def _nothing() -> None:
    pass


async def _invoke_prepared_async(
    registry: Registry, prep: _Prepared, signal: CancelSignal | None = None
) -> list[Outcome]:
    ctx = prep.ctx
    if signal is None:
        signal = ctx.signal
    entered: list[Middleware] = []
    result: Any = None
    error: BaseException | None = None
    disarm = _arm_cancel(signal)
    middlewares = registry.middlewares
    try:
        if middlewares:
            _run_before(middlewares, ctx, entered)
        if signal.is_set:
            ctx.raise_if_cancelled()
        result = await prep.spec.fn(prep.arg, ctx)
    except asyncio.CancelledError as exc:
        disarm()
        task = asyncio.current_task()
        if not ctx.cancelled:
            raise  # cancelled from outside (the worker is tearing down): propagate
        if task is not None and task.cancelling():
            task.uncancel()  # our own cancel request (one per arm): absorb it
        error = exc
    except BaseException as exc:  # every failure, even SystemExit, must still produce a Result
        error = exc
    finally:
        disarm()
    if entered:
        error = _run_after(entered, ctx, result, error)
    if error is None:
        return _map_success(prep, result)
    return _map_failure(prep, error)
