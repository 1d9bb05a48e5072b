"""Conversions between conveyor.v1 protobuf messages and the engine's domain model.

Times are exact: a Timestamp / Duration becomes integer nanoseconds and back without rounding.
Reading a malformed one raises ``invalid_argument`` naming the field; writing never fails.
"""

from __future__ import annotations

import logging

from google.protobuf import duration_pb2, timestamp_pb2

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import InvalidArgument
from conveyor_server_min._engine.clock import MAX_INSTANT, MIN_INSTANT, NANOS, clamp, from_parts, in_range
from conveyor_server_min._engine.model import Task, TaskEvent

__all__ = [
    "duration",
    "duration_ns",
    "enqueue_response",
    "envelope",
    "event_message",
    "fill_envelope",
    "fill_options",
    "fill_task_info",
    "instant_after",
    "set_timestamp",
    "task_info",
    "task_info_safe",
    "timestamp",
    "timestamp_ns",
]

log = logging.getLogger("conveyor.server")
UNENCODABLE = "server could not encode this task"
_MAX_DURATION_SECONDS = 315_576_000_000
_RANGE = "0001-01-01T00:00:00Z..9999-12-31T23:59:59.999999999Z"


def timestamp(instant: int) -> timestamp_pb2.Timestamp:
    """An engine instant (epoch nanoseconds) as a Timestamp, exactly; clamped into the valid range so
    encoding never fails (every stored instant is already in range)."""
    if not MIN_INSTANT <= instant <= MAX_INSTANT:  # clamp() and to_parts(), inline: a hot path
        instant = clamp(instant)
    seconds, nanos = divmod(instant, NANOS)
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


def duration(nanos: int) -> duration_pb2.Duration:
    """Integer nanoseconds as a Duration, exactly (seconds and nanos share the sign)."""
    seconds = abs(nanos) // NANOS
    rest = abs(nanos) - seconds * NANOS
    if nanos < 0:
        return duration_pb2.Duration(seconds=-seconds, nanos=-rest)
    return duration_pb2.Duration(seconds=seconds, nanos=rest)


def timestamp_ns(msg: object, field: str, label: str = "") -> int | None:
    """The field as epoch nanoseconds when present; None when absent.

    Raises InvalidArgument naming the field (or ``label``) when it is not a valid Timestamp.
    """
    if not msg.HasField(field):  # type: ignore[attr-defined]
        return None
    ts = getattr(msg, field)
    instant = from_parts(ts.seconds, ts.nanos)
    if not (0 <= ts.nanos < NANOS and in_range(instant)):
        raise InvalidArgument(
            f"{label or field} is not a valid Timestamp (seconds={ts.seconds}, nanos={ts.nanos}); "
            f"it must lie within {_RANGE}"
        )
    return instant


def duration_ns(msg: object, field: str, label: str = "") -> int | None:
    """The field in nanoseconds when present; None when absent.

    Raises InvalidArgument naming the field (or ``label``) when it is not a valid Duration.
    """
    if not msg.HasField(field):  # type: ignore[attr-defined]
        return None
    d = getattr(msg, field)
    seconds, nanos = d.seconds, d.nanos
    if (
        abs(seconds) > _MAX_DURATION_SECONDS
        or abs(nanos) >= NANOS
        or (seconds > 0 and nanos < 0)
        or (seconds < 0 and nanos > 0)
    ):
        raise InvalidArgument(
            f"{label or field} is not a valid Duration (seconds={seconds}, nanos={nanos}); "
            f"|seconds| must be at most {_MAX_DURATION_SECONDS} and nanos share its sign"
        )
    return seconds * NANOS + nanos


def instant_after(now: int, delta: int, field: str) -> int:
    """``now + delta``, or InvalidArgument naming ``field`` when that instant is not a valid Timestamp."""
    instant = now + delta
    if not in_range(instant):
        raise InvalidArgument(
            f"{field} is out of range: now + {field} falls outside the Timestamp range {_RANGE}"
        )
    return instant


def task_info(task: Task) -> pb.TaskInfo:
    info = pb.TaskInfo()
    fill_task_info(info, task)
    return info


def enqueue_response(task: Task) -> pb.EnqueueResponse:
    """The Enqueue reply for ``task``, written in place (``EnqueueResponse(task=info)`` would copy it)."""
    response = pb.EnqueueResponse()
    fill_task_info(response.task, task)
    return response


def fill_task_info(info: pb.TaskInfo, task: Task) -> None:
    """Write ``task`` into an empty TaskInfo in place (fields that are often at their default only when
    they are not: proto3 sends no default anyway)."""
    info.id = task.id
    info.queue = task.queue
    info.type = task.type
    info.state = task.state
    info.priority = task.priority
    info.max_retry = task.max_retry
    if task.retried:
        info.retried = task.retried
    if task.last_error:
        info.last_error = task.last_error
    set_timestamp(info.enqueued_at, task.enqueued_at)
    info.payload = task.payload
    info.content_type = task.content_type
    if task.progress:
        info.progress = task.progress
    if task.progress_message:
        info.progress_message = task.progress_message
    if task.process_at is not None:
        set_timestamp(info.process_at, task.process_at)
    if task.completed_at is not None:
        set_timestamp(info.completed_at, task.completed_at)
    if task.started_at is not None:
        set_timestamp(info.started_at, task.started_at)


def task_info_safe(task: Task) -> pb.TaskInfo:
    """:func:`task_info` for listings: a row that cannot be encoded becomes a stub carrying its id, queue,
    state and the reason, so one bad row never fails a listing or a lookup."""
    try:
        return task_info(task)
    except Exception as exc:  # isolation point: one bad row must not fail the answer for the others
        log.exception("cannot encode task %r", task.id)
        return pb.TaskInfo(
            id=task.id, queue=task.queue, state=int(task.state), last_error=f"{UNENCODABLE}: {exc}"
        )


def set_timestamp(msg: timestamp_pb2.Timestamp, instant: int) -> None:
    """Write an engine instant into an existing Timestamp field in place (as :func:`timestamp`)."""
    if not MIN_INSTANT <= instant <= MAX_INSTANT:  # as in timestamp()
        instant = clamp(instant)
    msg.seconds, msg.nanos = divmod(instant, NANOS)


def _set_duration(msg: duration_pb2.Duration, nanos: int) -> None:
    seconds = abs(nanos) // NANOS
    rest = abs(nanos) - seconds * NANOS
    msg.seconds, msg.nanos = (-seconds, -rest) if nanos < 0 else (seconds, rest)


def fill_options(opts: tpb.TaskOptions, task: Task) -> None:
    """Write the task's options into ``opts`` in place (only fields that differ from the default)."""
    opts.SetInParent()
    opts.max_retry = task.max_retry  # proto3 scalars: a default value is simply not sent
    opts.unique_key = task.unique_key
    opts.priority = task.priority
    opts.group = task.group
    opts.concurrency_key = task.concurrency_key
    for dep in task.depends_on:
        opts.depends_on.add(task_id=dep.task_id, on_failure=int(dep.on_failure))
    _fill_option_times(opts, task)


def _fill_option_times(opts: tpb.TaskOptions, task: Task) -> None:
    if task.deadline is not None:
        set_timestamp(opts.deadline, task.deadline)
    if task.process_at is not None:
        set_timestamp(opts.process_at, task.process_at)
    if task.expires_at is not None:
        set_timestamp(opts.expires_at, task.expires_at)
    if task.timeout is not None:
        _set_duration(opts.timeout, task.timeout)
    if task.unique_ttl is not None:
        _set_duration(opts.unique_ttl, task.unique_ttl)
    if task.retention is not None:
        _set_duration(opts.retention, task.retention)
    policy = task.retry_policy
    if policy is not None:
        opts.retry_policy.strategy = policy.strategy
        if policy.base:
            _set_duration(opts.retry_policy.base, policy.base)
        if policy.max:
            _set_duration(opts.retry_policy.max, policy.max)


def options(task: Task) -> tpb.TaskOptions:
    opts = tpb.TaskOptions()
    fill_options(opts, task)
    return opts


def fill_envelope(env: tpb.TaskEnvelope, task: Task) -> None:
    """Write the task into ``env`` in place: a Dispatch builds its envelope where it is sent from,
    without temporary messages or a CopyFrom of the payload."""
    env.id = task.id
    env.queue = task.queue
    env.type = task.type
    env.payload = task.payload
    env.content_type = task.content_type
    if task.metadata:
        env.metadata.update(task.metadata)
    fill_options(env.options, task)
    env.retried = task.retried
    env.last_error = task.last_error
    set_timestamp(env.enqueued_at, task.enqueued_at)
    env.progress = task.progress
    env.progress_message = task.progress_message
    if task.started_at is not None:
        set_timestamp(env.started_at, task.started_at)
    if task.completed_at is not None:
        set_timestamp(env.completed_at, task.completed_at)


def envelope(task: Task) -> tpb.TaskEnvelope:
    env = tpb.TaskEnvelope()
    fill_envelope(env, task)
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
