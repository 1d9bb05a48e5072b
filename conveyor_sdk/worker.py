"""Public worker API: register handlers, then run a :class:`Worker` against a Conveyor server.

Example::

    from conveyor_sdk.worker import Registry, Worker, SkipRetry

    reg = Registry()

    @reg.handler("email.send")
    async def send(task, ctx):
        ...  # task is a conveyor_sdk.worker.Task (payload bytes, metadata, ...)

    Worker("http://localhost:8080", queues={"default": 1}, concurrency=8).run_sync(reg)

See ``docs/worker-core.md`` for outcome mapping, middleware hooks, cancellation and drain.
"""

from __future__ import annotations

from conveyor_sdk._worker.context import CancelSignal, TaskContext
from conveyor_sdk._worker.executor import (
    CancelReason,
    Executor,
    Job,
    JobControl,
    Outcome,
    OutcomeKind,
    TaskData,
)
from conveyor_sdk._worker.invoke import invoke, invoke_async
from conveyor_sdk._worker.local import LocalExecutor
from conveyor_sdk._worker.outcomes import SkipRetry, TaskCancelled
from conveyor_sdk._worker.registry import HandlerSpec, Middleware, Registry
from conveyor_sdk._worker.runner import SDK_VERSION, Worker

Task = TaskData

__all__ = [
    "SDK_VERSION",
    "CancelReason",
    "CancelSignal",
    "Executor",
    "HandlerSpec",
    "Job",
    "JobControl",
    "LocalExecutor",
    "Middleware",
    "Outcome",
    "OutcomeKind",
    "Registry",
    "SkipRetry",
    "Task",
    "TaskCancelled",
    "TaskContext",
    "TaskData",
    "Worker",
    "invoke",
    "invoke_async",
]
