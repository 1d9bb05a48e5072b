"""Enqueue validation and defaults (server-behavior.md §10.1: order and messages; all invalid_argument)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import InvalidArgument
from conveyor_server_min._engine.model import Dependency, FailurePolicy, RetryPolicy, Task
from conveyor_server_min._services.convert import duration_seconds, timestamp_seconds

__all__ = [
    "MAX_BATCH",
    "MAX_DEPENDENCIES",
    "MAX_PAYLOAD",
    "build_task",
    "check_batch_size",
    "check_queue_name",
    "go_quote",
    "valid_queue_name",
]

MAX_PAYLOAD = 1 << 20
MAX_BATCH = 1000
MAX_DEPENDENCIES = 1000
DEFAULT_QUEUE = "default"
DEFAULT_PRIORITY = 4
_QUEUE_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")


def go_quote(text: str) -> str:
    """Approximate Go's %q: a double-quoted string with escapes."""
    return json.dumps(text, ensure_ascii=False)


def valid_queue_name(name: str) -> bool:
    return _QUEUE_RE.fullmatch(name) is not None


def check_queue_name(name: str) -> None:
    if not valid_queue_name(name):
        raise InvalidArgument(f"invalid queue name {go_quote(name)}")


def check_batch_size(count: int) -> None:
    if count == 0:
        raise InvalidArgument("batch must contain at least one task")
    if count > MAX_BATCH:
        raise InvalidArgument(
            f"batch holds {count} tasks, the maximum is {MAX_BATCH}; split it into smaller batches"
        )


def _check(req: pb.EnqueueRequest, queue: str) -> None:
    if not req.type:
        raise InvalidArgument("task type is required")
    check_queue_name(queue)
    if len(req.payload) > MAX_PAYLOAD:
        raise InvalidArgument(
            f"payload is {len(req.payload)} bytes, the maximum is {MAX_PAYLOAD}; "
            "store large data elsewhere and enqueue a reference to it"
        )
    delayed = (
        timestamp_seconds(req, "process_at") is not None or duration_seconds(req, "process_in") is not None
    )
    if timestamp_seconds(req, "process_at") is not None and duration_seconds(req, "process_in") is not None:
        raise InvalidArgument("process_at and process_in are mutually exclusive")
    if timestamp_seconds(req, "expires_at") is not None and duration_seconds(req, "expires_in") is not None:
        raise InvalidArgument("expires_at and expires_in are mutually exclusive")
    if req.group and delayed:
        raise InvalidArgument("group and process_at/process_in are mutually exclusive")
    if req.group and req.concurrency_key:
        raise InvalidArgument("group and concurrency_key are mutually exclusive")
    if req.max_retry < 0:
        raise InvalidArgument(f"max_retry must not be negative, got {req.max_retry}")
    if not 0 <= req.priority <= 9:
        raise InvalidArgument(f"priority must be in 0..9, got {req.priority}")
    if len(req.depends_on) > MAX_DEPENDENCIES:
        raise InvalidArgument(
            f"a task may depend on at most {MAX_DEPENDENCIES} tasks, got {len(req.depends_on)}"
        )
    if any(not dep.task_id for dep in req.depends_on):
        raise InvalidArgument("a dependency must name a task id")


def _relative(req: pb.EnqueueRequest, absolute: str, relative: str, now: float) -> float | None:
    at = timestamp_seconds(req, absolute)
    if at is not None:
        return at
    delta = duration_seconds(req, relative)
    return None if delta is None else now + delta


def _policy(value: int) -> FailurePolicy:
    try:
        return FailurePolicy(value) if value else FailurePolicy.BLOCK
    except ValueError:
        return FailurePolicy.BLOCK


def _retry_policy(req: pb.EnqueueRequest) -> RetryPolicy | None:
    if not req.HasField("retry_policy"):
        return None
    rp = req.retry_policy
    return RetryPolicy(
        strategy=int(rp.strategy),
        base=duration_seconds(rp, "base") or 0.0,
        max=duration_seconds(rp, "max") or 0.0,
    )


def build_task(
    req: pb.EnqueueRequest, *, now: float, new_id: Callable[[], str], default_max_retry: int
) -> Task:
    """Validate ``req`` in the upstream order and return the task with server defaults applied."""
    queue = req.queue or DEFAULT_QUEUE
    _check(req, queue)
    return Task(
        id=req.task_id or new_id(),
        queue=queue,
        type=req.type,
        enqueued_at=now,
        payload=req.payload,
        content_type=req.content_type,
        metadata=dict(req.metadata),
        max_retry=req.max_retry or default_max_retry,
        priority=req.priority or DEFAULT_PRIORITY,
        timeout=duration_seconds(req, "timeout"),
        deadline=timestamp_seconds(req, "deadline"),
        process_at=_relative(req, "process_at", "process_in", now),
        unique_key=req.unique_key,
        unique_ttl=duration_seconds(req, "unique_ttl") if req.unique_key else None,
        retention=duration_seconds(req, "retention"),
        group=req.group,
        expires_at=_relative(req, "expires_at", "expires_in", now),
        depends_on=tuple(Dependency(d.task_id, _policy(d.on_failure)) for d in req.depends_on),
        concurrency_key=req.concurrency_key,
        retry_policy=_retry_policy(req),
    )
