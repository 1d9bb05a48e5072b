"""Call one handler directly, without a server: :func:`call_task` and :class:`CallResult`.

The handler gets a real :class:`~conveyor_sdk.worker.TaskContext` built from the arguments
(task id, ``retried``, ``max_retry``, metadata, an optional pre-fired cancel signal), and
every ``ctx.report_progress`` call is captured. Async handlers run in a fresh event loop
(or are awaited by :func:`call_task_async` inside a running one).
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conveyor_sdk._worker.context import CancelSignal, TaskContext
from conveyor_sdk._worker.executor import CancelReason, Job, TaskData
from conveyor_sdk.app import TaskDefinition

__all__ = ["CallResult", "Progress", "call_task", "call_task_async", "make_context"]


@dataclass(frozen=True, slots=True)
class Progress:
    """One ``ctx.report_progress`` call."""

    task_id: str
    percent: int
    message: str


@dataclass(frozen=True, slots=True)
class CallResult:
    """What one direct call did: the return value or the exception, and the progress reported."""

    value: Any
    error: BaseException | None
    progress: tuple[Progress, ...]
    context: TaskContext

    @property
    def ok(self) -> bool:
        """True when the handler returned without raising."""
        return self.error is None


def make_context(
    definition: TaskDefinition[Any, Any],
    *,
    task_id: str | None = None,
    retried: int = 0,
    max_retry: int = 25,
    queue: str | None = None,
    metadata: Mapping[str, str] | None = None,
    cancel: CancelReason | None = None,
    payloads: Sequence[bytes] = (b"",),
    sink: list[Progress] | None = None,
) -> TaskContext:
    """A :class:`TaskContext` as a worker builds it for ``definition`` (one task per payload)."""
    first = task_id or uuid.uuid4().hex
    ids = [first, *(f"{first}-{n}" for n in range(1, len(payloads)))]
    q = queue or definition.defaults.get("queue") or "default"
    tasks = tuple(
        TaskData(
            id=tid,
            queue=q,
            type=definition.type,
            payload=data,
            content_type=definition.content_type,
            metadata=dict(metadata or {}),
            retried=retried,
            max_retry=max_retry,
        )
        for tid, data in zip(ids, payloads, strict=True)
    )
    job_id = f"batch:{first}" if len(tasks) > 1 else first
    job = Job(
        job_id=job_id, queue=q, type=definition.type, tasks=tasks, batch=definition.batch, deadline=None
    )
    signal = CancelSignal()
    if cancel is not None:
        signal.set(cancel)
    captured = sink if sink is not None else []

    def record(task: str, percent: int, message: str) -> None:
        captured.append(Progress(task, percent, message))

    return TaskContext(job, signal, record)


def _prepare(
    definition: TaskDefinition[Any, Any], payload: Any, options: dict[str, Any]
) -> tuple[Any, TaskContext, list[Progress]]:
    if not isinstance(definition, TaskDefinition):
        raise TypeError(f"call_task needs a task definition (an @app.task function), not {definition!r}")
    members = list(payload) if definition.batch else [payload]
    if not members:
        raise ValueError(f"batch task {definition.type!r}: give at least one payload")
    # Through the codec both ways, as a delivery would: a payload a worker could not decode fails here.
    encoded = [definition.encode(m) for m in members]
    codecs = definition.app.codecs
    decoded = [codecs.decode(d, definition.content_type, definition.element_type) for d in encoded]
    sink: list[Progress] = []
    ctx = make_context(definition, payloads=encoded, sink=sink, **options)
    return (decoded if definition.batch else decoded[0]), ctx, sink


def call_task(definition: TaskDefinition[Any, Any], payload: Any, /, **options: Any) -> CallResult:
    """Run ``definition``'s handler once on ``payload`` (async handlers in a new event loop).

    ``options`` are :func:`make_context`'s: ``task_id``, ``retried``, ``max_retry``, ``queue``,
    ``metadata``, ``cancel`` (a :class:`CancelReason`: the signal has already fired).
    """
    decoded, ctx, sink = _prepare(definition, payload, options)
    try:
        value = definition.fn(decoded, ctx)
        if inspect.iscoroutine(value):
            value = asyncio.run(value)
    except Exception as exc:
        return CallResult(None, exc, tuple(sink), ctx)
    return CallResult(value, None, tuple(sink), ctx)


async def call_task_async(
    definition: TaskDefinition[Any, Any], payload: Any, /, **options: Any
) -> CallResult:
    """:func:`call_task` for a running event loop (sync handlers run in a thread)."""
    decoded, ctx, sink = _prepare(definition, payload, options)
    try:
        if inspect.iscoroutinefunction(definition.fn):
            value = await definition.fn(decoded, ctx)
        else:
            value = await asyncio.to_thread(definition.fn, decoded, ctx)
    except Exception as exc:
        return CallResult(None, exc, tuple(sink), ctx)
    return CallResult(value, None, tuple(sink), ctx)
