"""Conversions between conveyor.v1 protobuf messages and the engine's domain model."""

from __future__ import annotations

from google.protobuf import duration_pb2, timestamp_pb2

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_server_min._engine.model import Task, TaskEvent

__all__ = [
    "duration",
    "duration_seconds",
    "envelope",
    "event_message",
    "task_info",
    "timestamp",
    "timestamp_seconds",
]

_MAX_DURATION = 315_576_000_000
_MIN_TS, _MAX_TS = -62_135_596_800, 253_402_300_799


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(round(seconds * 1e9))
    return ts


def duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def timestamp_seconds(msg: object, field: str) -> float | None:
    """The field's value in epoch seconds when present and in range, else None."""
    if not msg.HasField(field):  # type: ignore[attr-defined]
        return None
    ts = getattr(msg, field)
    if not (_MIN_TS <= ts.seconds <= _MAX_TS) or not (0 <= ts.nanos < 1_000_000_000):
        return None
    return ts.seconds + ts.nanos / 1e9


def duration_seconds(msg: object, field: str) -> float | None:
    """The field's value in seconds when present and in range, else None."""
    if not msg.HasField(field):  # type: ignore[attr-defined]
        return None
    d = getattr(msg, field)
    if abs(d.seconds) > _MAX_DURATION or abs(d.nanos) >= 1_000_000_000:
        return None
    if (d.seconds > 0 and d.nanos < 0) or (d.seconds < 0 and d.nanos > 0):
        return None
    return d.seconds + d.nanos / 1e9


def task_info(task: Task) -> pb.TaskInfo:
    info = pb.TaskInfo(
        id=task.id,
        queue=task.queue,
        type=task.type,
        state=int(task.state),
        priority=task.priority,
        retried=task.retried,
        max_retry=task.max_retry,
        last_error=task.last_error,
        enqueued_at=timestamp(task.enqueued_at),
        payload=task.payload,
        content_type=task.content_type,
        progress=task.progress,
        progress_message=task.progress_message,
    )
    if task.process_at is not None:
        info.process_at.CopyFrom(timestamp(task.process_at))
    if task.completed_at is not None:
        info.completed_at.CopyFrom(timestamp(task.completed_at))
    if task.started_at is not None:
        info.started_at.CopyFrom(timestamp(task.started_at))
    return info


def options(task: Task) -> tpb.TaskOptions:
    opts = tpb.TaskOptions(
        max_retry=task.max_retry,
        unique_key=task.unique_key,
        priority=task.priority,
        group=task.group,
        concurrency_key=task.concurrency_key,
        depends_on=[
            tpb.TaskDependency(task_id=d.task_id, on_failure=int(d.on_failure)) for d in task.depends_on
        ],
    )
    for name in ("deadline", "process_at", "expires_at"):
        value = getattr(task, name)
        if value is not None:
            getattr(opts, name).CopyFrom(timestamp(value))
    for name in ("timeout", "unique_ttl", "retention"):
        value = getattr(task, name)
        if value is not None:
            getattr(opts, name).CopyFrom(duration(value))
    policy = task.retry_policy
    if policy is not None:
        opts.retry_policy.strategy = policy.strategy
        if policy.base:
            opts.retry_policy.base.CopyFrom(duration(policy.base))
        if policy.max:
            opts.retry_policy.max.CopyFrom(duration(policy.max))
    return opts


def envelope(task: Task) -> tpb.TaskEnvelope:
    env = tpb.TaskEnvelope(
        id=task.id,
        queue=task.queue,
        type=task.type,
        payload=task.payload,
        content_type=task.content_type,
        metadata=task.metadata,
        options=options(task),
        retried=task.retried,
        last_error=task.last_error,
        enqueued_at=timestamp(task.enqueued_at),
        progress=task.progress,
        progress_message=task.progress_message,
    )
    if task.started_at is not None:
        env.started_at.CopyFrom(timestamp(task.started_at))
    if task.completed_at is not None:
        env.completed_at.CopyFrom(timestamp(task.completed_at))
    return env


def event_message(event: TaskEvent) -> tpb.TaskEvent:
    return tpb.TaskEvent(
        id=event.id,
        queue=event.queue,
        type=event.type,
        state=int(event.state),
        event_type=int(event.event_type),
        occurred_at=timestamp(event.occurred_at),
        attempt=event.attempt,
        last_error=event.last_error,
    )
