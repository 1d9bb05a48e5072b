"""Pure request builders shared by the async and sync clients (no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from conveyor_sdk import _tracecontext as tracing
from conveyor_sdk._client.options import (
    TaskSpec,
    ValidationError,
    build_request,
    check_batch_size,
    to_aware,
    to_timedelta,
    validate_queue,
)
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.codecs import CodecRegistry
from conveyor_sdk.types import Duration, TaskState

__all__ = [
    "batch_ids",
    "enqueue",
    "enqueue_items",
    "list_tasks",
    "queue_name",
    "reschedule",
    "task_id",
]


def enqueue(
    type: str, payload: Any, options: Any, codecs: CodecRegistry, *, trace: bool
) -> pb.EnqueueRequest:
    """One validated EnqueueRequest, with ``traceparent`` injected when tracing is active."""
    req = build_request(type, payload, options, codecs)
    if trace:
        tracing.inject(req.metadata)
    return req


def enqueue_items(tasks: Sequence[TaskSpec], codecs: CodecRegistry, *, trace: bool, what: str) -> list[Any]:
    """Validated requests for a batch/transaction; errors name the failing item index."""
    if isinstance(tasks, TaskSpec) or not isinstance(tasks, Sequence):
        raise ValidationError(f"{what} takes a sequence of TaskSpec")
    check_batch_size(len(tasks), what)
    out = []
    for index, spec in enumerate(tasks):
        if not isinstance(spec, TaskSpec):
            raise ValidationError(f"{what} item {index}: expected TaskSpec, got {type(spec).__name__}")
        try:
            out.append(enqueue(spec.type, spec.payload, spec.options, codecs, trace=trace))
        except ValueError as exc:
            raise ValidationError(f"{what} item {index}: {exc}") from exc
    return out


def task_id(id: str) -> str:
    """Non-empty task id."""
    if not isinstance(id, str) or not id:
        raise ValidationError("task id is required")
    return id


def queue_name(queue: str) -> str:
    """Validated queue name."""
    if not isinstance(queue, str) or not queue:
        raise ValidationError("queue name is required")
    return validate_queue(queue)


def list_tasks(
    queue: str | None, state: TaskState | str | None, limit: int, page_token: str
) -> pb.ListTasksRequest:
    """ListTasks request; ``limit`` 0 = server default (50), max 1000."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= 1000:
        raise ValidationError(f"limit must be an int in 0..1000, got {limit!r}")
    req = pb.ListTasksRequest(limit=limit, page_token=page_token)
    if queue:
        req.queue = validate_queue(queue)
    if state is not None:
        parsed = TaskState.parse(state) if isinstance(state, str) else TaskState(state)
        req.state = int(parsed)  # type: ignore[assignment]  # stubs type the field as the pb enum class
    return req


def reschedule(id: str, process_at: datetime | None, process_in: Duration | None) -> pb.RescheduleTaskRequest:
    """Exactly one of ``process_at`` / ``process_in``."""
    if (process_at is None) == (process_in is None):
        raise ValidationError("reschedule needs exactly one of process_at or process_in")
    req = pb.RescheduleTaskRequest(id=task_id(id))
    if process_at is not None:
        req.process_at.FromDatetime(to_aware("process_at", process_at))
    if process_in is not None:
        req.process_in.FromTimedelta(to_timedelta("process_in", process_in))
    return req


def batch_ids(ids: Sequence[str]) -> pb.BatchTasksRequest:
    """1..1000 ids."""
    if isinstance(ids, str):
        raise ValidationError("ids must be a list of task ids")
    check_batch_size(len(ids), "batch action")
    return pb.BatchTasksRequest(ids=list(ids))
