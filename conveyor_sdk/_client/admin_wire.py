"""Pure request builders and converters for the cron, limit, group, info and event RPCs.

Client-side checks mirror the server's ``invalid_argument`` rules (server-behavior §11, §13)
so a typo fails before the network; the server stays the authority (e.g. for cron syntax).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypedDict

from conveyor_sdk._client.admin_types import (
    BrokerInfo,
    ClusterNode,
    ConcurrencyLimit,
    CronEntry,
    GroupConfig,
    RateLimit,
    TaskEvent,
    TaskEventType,
)
from conveyor_sdk._client.convert import timestamp
from conveyor_sdk._client.options import (
    OPTION_NAMES,
    ValidationError,
    build_request,
    to_timedelta,
    validate_queue,
)
from conveyor_sdk._client.requests import queue_name
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.codecs import CodecRegistry
from conveyor_sdk.types import Dependency, Duration, RetryPolicy, RetryStrategy, TaskState

__all__ = [
    "CRON_OPTION_NAMES",
    "CronOptions",
    "broker_info",
    "cluster_nodes",
    "concurrency_limit",
    "concurrency_request",
    "cron_entry",
    "cron_entry_message",
    "group_config",
    "group_request",
    "rate_limit",
    "rate_request",
    "task_event",
    "watch_request",
]


class CronOptions(TypedDict, total=False):
    """Options a cron entry copies onto every task it creates (a subset of EnqueueOptions)."""

    queue: str
    content_type: str
    max_retry: int
    timeout: Duration
    deadline: datetime
    retention: Duration
    priority: int
    group: str
    expires_at: datetime
    concurrency_key: str
    retry_policy: RetryPolicy
    depends_on: Sequence[str | Dependency]


CRON_OPTION_NAMES = frozenset(CronOptions.__optional_keys__)
# Copied from the validated EnqueueRequest into CronEntry.options (TaskOptions).
_COPIED = ("max_retry", "timeout", "deadline", "retention", "priority", "group", "expires_at",
           "concurrency_key", "retry_policy")  # fmt: skip


def _check_cron_options(options: Mapping[str, Any]) -> None:
    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:
        raise TypeError(f"unknown cron option(s): {', '.join(unknown)}")
    refused = sorted(set(options) - CRON_OPTION_NAMES)
    if refused:
        raise ValidationError(
            f"a cron entry cannot carry {', '.join(refused)} (the server sets ids, due times and "
            "uniqueness per fire)"
        )


def cron_entry_message(
    head: tuple[str, str, str], payload: Any, options: Mapping[str, Any], codecs: CodecRegistry,
    *, paused: bool = False,
) -> pb.CronEntry:  # fmt: skip
    """A validated CronEntry from ``(id, spec, type)``; the payload is encoded like an Enqueue payload."""
    id, spec, type = head
    if not isinstance(id, str) or not id:
        raise ValidationError("cron entry id is required")
    if not isinstance(spec, str) or not spec.strip():
        raise ValidationError("cron spec is required (e.g. '0 0 2 * * *', seconds first)")
    _check_cron_options(options)
    req = build_request(type, payload, options, codecs)
    entry = pb.CronEntry(
        id=id, spec=spec, task_type=type, queue=req.queue, payload=req.payload,
        content_type=req.content_type, paused=paused,
    )  # fmt: skip
    for name in _COPIED:
        if req.DESCRIPTOR.fields_by_name[name].message_type is None:
            setattr(entry.options, name, getattr(req, name))
        elif req.HasField(name):
            getattr(entry.options, name).CopyFrom(getattr(req, name))
    entry.options.depends_on.extend(req.depends_on)
    return entry


def _duration(msg: Any, name: str) -> timedelta | None:
    if not msg.HasField(name):
        return None
    value: timedelta = getattr(msg, name).ToTimedelta()
    return value


def _retry_policy(opts: tpb.TaskOptions) -> RetryPolicy | None:
    if not opts.HasField("retry_policy"):
        return None
    rp = opts.retry_policy
    try:
        strategy = RetryStrategy(rp.strategy)
    except ValueError:
        strategy = RetryStrategy.DEFAULT
    return RetryPolicy(strategy=strategy, base=_duration(rp, "base"), max=_duration(rp, "max"))


def cron_entry(msg: pb.CronEntry) -> CronEntry:
    """Typed view of a wire CronEntry."""
    opts = msg.options
    return CronEntry(
        id=msg.id, spec=msg.spec, type=msg.task_type, queue=msg.queue, payload=msg.payload,
        content_type=msg.content_type, paused=msg.paused, next_run_at=timestamp(msg, "next_run_at"),
        priority=opts.priority, max_retry=opts.max_retry, timeout=_duration(opts, "timeout"),
        retention=_duration(opts, "retention"), deadline=timestamp(opts, "deadline"),
        expires_at=timestamp(opts, "expires_at"), group=opts.group, concurrency_key=opts.concurrency_key,
        retry_policy=_retry_policy(opts), depends_on=tuple(d.task_id for d in opts.depends_on),
    )  # fmt: skip


def rate_request(queue: str, rate_per_sec: float, burst: int) -> pb.SetQueueRateLimitRequest:
    """Rate must be a finite number > 0 and burst an int >= 1."""
    if isinstance(rate_per_sec, bool) or not isinstance(rate_per_sec, int | float):
        raise ValidationError(f"rate must be a number of tasks per second, got {rate_per_sec!r}")
    if not (math.isfinite(rate_per_sec) and rate_per_sec > 0):
        raise ValidationError(f"rate must be a finite number > 0 (tasks per second), got {rate_per_sec}")
    _positive_int("burst", burst)
    return pb.SetQueueRateLimitRequest(queue=queue_name(queue), rate_per_sec=float(rate_per_sec), burst=burst)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
        raise ValidationError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def concurrency_request(queue: str, max_active: int) -> pb.SetQueueConcurrencyLimitRequest:
    """max_active must be an int >= 1."""
    _positive_int("max_active", max_active)
    return pb.SetQueueConcurrencyLimitRequest(queue=queue_name(queue), max_active=max_active)


def group_request(
    queue: str, group: str, max_size: int, max_delay: Duration, grace_period: Duration
) -> pb.SetGroupConfigRequest:
    """max_size >= 1, max_delay > 0, grace_period > 0 (``group == ""`` = queue-wide default)."""
    _positive_int("max_size", max_size)
    req = pb.SetGroupConfigRequest(queue=queue_name(queue), group=group, max_size=max_size)
    for name, value in (("max_delay", max_delay), ("grace_period", grace_period)):
        delta = to_timedelta(name, value)
        if delta <= timedelta(0):
            raise ValidationError(f"{name} must be positive, got {value!r}")
        getattr(req, name).FromTimedelta(delta)
    return req


def watch_request(queues: Iterable[str], event_types: Iterable[TaskEventType | str]) -> pb.WatchEventsRequest:
    """Server-side filters: queue names and event kinds (empty = everything)."""
    if isinstance(queues, str):
        raise ValidationError("queues must be a list of queue names")
    kinds = [TaskEventType.parse(t) if isinstance(t, str) else TaskEventType(t) for t in event_types]
    req = pb.WatchEventsRequest(queues=[validate_queue(q) for q in queues])
    req.event_types.extend(int(k) for k in kinds)
    return req


def rate_limit(msg: pb.RateLimitInfo) -> RateLimit:
    """Typed rate-limit row."""
    return RateLimit(queue=msg.queue, rate_per_sec=msg.rate_per_sec, burst=msg.burst)


def concurrency_limit(msg: pb.ConcurrencyLimitInfo) -> ConcurrencyLimit:
    """Typed concurrency-limit row."""
    return ConcurrencyLimit(queue=msg.queue, max_active=msg.max_active)


def group_config(msg: pb.GroupConfigInfo) -> GroupConfig:
    """Typed group-config row."""
    return GroupConfig(
        queue=msg.queue, group=msg.group, max_size=msg.max_size,
        max_delay=_duration(msg, "max_delay"), grace_period=_duration(msg, "grace_period"),
    )  # fmt: skip


def cluster_nodes(msg: pb.ClusterInfoResponse) -> list[ClusterNode]:
    """Typed ClusterInfo nodes."""
    return [ClusterNode(address=n.address, started_at=timestamp(n, "started_at")) for n in msg.nodes]


def broker_info(msg: pb.BrokerInfoResponse) -> BrokerInfo:
    """Typed BrokerInfo (metrics sorted by name)."""
    return BrokerInfo(driver=msg.driver, metrics=dict(sorted(msg.metrics.items())))


def task_event(msg: tpb.TaskEvent) -> TaskEvent:
    """Typed lifecycle event."""
    return TaskEvent(
        id=msg.id, queue=msg.queue, type=msg.type, state=TaskState.from_wire(msg.state),
        event_type=TaskEventType.from_wire(msg.event_type), occurred_at=timestamp(msg, "occurred_at"),
        attempt=msg.attempt, last_error=msg.last_error,
    )  # fmt: skip
