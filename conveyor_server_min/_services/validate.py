"""Enqueue validation and defaults (server-behavior.md §10.1: order and messages; all invalid_argument).

After the upstream checks come this server's own: string sizes (:mod:`.bounds`), then time options.
Every Timestamp / Duration must be valid, and every instant the server derives from one
(``now + process_in``, ``now + expires_in``, ``now + timeout`` / ``unique_ttl`` / ``retention``) must
itself be a valid Timestamp; otherwise ``invalid_argument`` names the field and nothing is committed.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import InvalidArgument
from conveyor_server_min._engine.model import Dependency, FailurePolicy, RetryPolicy, Task
from conveyor_server_min._services.bounds import MAX_KEY, MAX_NAME, check_map, check_size
from conveyor_server_min._services.convert import duration_ns, instant_after, timestamp_ns

__all__ = [
    "MAX_BATCH",
    "MAX_DEPENDENCIES",
    "MAX_PAYLOAD",
    "build_task",
    "check_batch_size",
    "check_queue_name",
    "check_task_id",
    "go_quote",
    "valid_queue_name",
]

MAX_PAYLOAD = 1 << 20
MAX_BATCH = 1000
MAX_DEPENDENCIES = 1000
DEFAULT_QUEUE = "default"
DEFAULT_PRIORITY = 4
_QUEUE_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
_FIELD, _NAME = operator.itemgetter(0), operator.attrgetter("name")  # of ListFields' (descriptor, value)


def go_quote(text: str) -> str:
    """Approximate Go's %q: a double-quoted string with escapes."""
    return json.dumps(text, ensure_ascii=False)


def valid_queue_name(name: str) -> bool:
    return len(name) <= MAX_NAME and _QUEUE_RE.fullmatch(name) is not None


_GOOD_QUEUES: set[str] = set()  # names that passed (producers repeat a few); bounded
_MAX_GOOD_QUEUES = 1024


def check_queue_name(name: str) -> None:
    if name in _GOOD_QUEUES:
        return
    check_size("queue name", name, MAX_NAME)
    if not valid_queue_name(name):
        raise InvalidArgument(f"invalid queue name {go_quote(name)}")
    if len(_GOOD_QUEUES) < _MAX_GOOD_QUEUES:
        _GOOD_QUEUES.add(name)


def check_task_id(task_id: str, field: str = "task id") -> None:
    check_size(field, task_id, MAX_NAME)


def check_batch_size(count: int) -> None:
    if count == 0:
        raise InvalidArgument("batch must contain at least one task")
    if count > MAX_BATCH:
        raise InvalidArgument(
            f"batch holds {count} tasks, the maximum is {MAX_BATCH}; split it into smaller batches"
        )


def _check(req: pb.EnqueueRequest, queue: str, present: frozenset[str]) -> None:
    """The upstream checks, in the upstream order and wording (server-behavior.md §10.1).

    ``present`` names the message fields that are set (one ListFields call instead of many HasField).
    """
    _check_names(req.type, queue, req.payload)
    if not present.isdisjoint(_CHECKED_OPTIONS):
        _check_options(req, present)


def _check_names(task_type: str, queue: str, payload: bytes) -> None:
    """The first upstream checks: type, queue and payload (read once by the caller: every read of a
    message field makes a new object, and a payload's is a copy)."""
    if not task_type:
        raise InvalidArgument("task type is required")
    if len(task_type) * 4 > MAX_NAME:  # check_size's own first test: only a long type needs the call
        check_size("task type", task_type, MAX_NAME)
    check_queue_name(queue)
    if len(payload) > MAX_PAYLOAD:
        raise InvalidArgument(
            f"payload is {len(payload)} bytes, the maximum is {MAX_PAYLOAD}; "
            "store large data elsewhere and enqueue a reference to it"
        )


# The fields the rest of the upstream checks read: with none of them set, every check passes.
_CHECKED_OPTIONS = frozenset(
    {"process_at", "process_in", "expires_at", "expires_in", "group", "concurrency_key", "max_retry",
     "priority", "depends_on"}
)  # fmt: skip


def _check_options(req: pb.EnqueueRequest, present: frozenset[str]) -> None:
    """The upstream checks after the names, in their order."""
    if "process_at" in present and "process_in" in present:
        raise InvalidArgument("process_at and process_in are mutually exclusive")
    if "expires_at" in present and "expires_in" in present:
        raise InvalidArgument("expires_at and expires_in are mutually exclusive")
    if req.group and ("process_at" in present or "process_in" in present):
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
    if req.depends_on and not all([dep.task_id for dep in req.depends_on]):
        raise InvalidArgument("a dependency must name a task id")


_SHORT = MAX_NAME // 4  # a code point is at most 4 bytes: a string this short is within every limit
_PLAIN = frozenset({"type", "queue", "payload", "content_type", "task_id"})


def _check_sizes(req: pb.EnqueueRequest) -> None:
    """This server's string bounds (see :mod:`.bounds`), after the upstream checks."""
    short = _SHORT
    if not (
        len(req.task_id) > short
        or len(req.unique_key) > short
        or len(req.group) > short
        or len(req.concurrency_key) > short
        or len(req.content_type) > short
        or req.metadata
        or req.depends_on
    ):
        return
    check_task_id(req.task_id, "task_id")
    check_size("unique_key", req.unique_key, MAX_KEY)
    check_size("group", req.group, MAX_NAME)
    check_size("concurrency_key", req.concurrency_key, MAX_NAME)
    check_size("content_type", req.content_type, MAX_NAME)
    check_map("metadata", req.metadata)
    for index, dep in enumerate(req.depends_on):
        check_task_id(dep.task_id, f"depends_on[{index}].task_id")


@dataclass(frozen=True, slots=True)
class _Times:
    """The request's time options as exact nanoseconds, each validated against the Timestamp range."""

    timeout: int | None
    deadline: int | None
    process_at: int | None
    expires_at: int | None
    unique_ttl: int | None
    retention: int | None
    retry_policy: RetryPolicy | None


def _relative(req: pb.EnqueueRequest, absolute: str, relative: str, now: int) -> int | None:
    at = timestamp_ns(req, absolute)
    if at is not None:
        return at
    delta = duration_ns(req, relative)
    return None if delta is None else instant_after(now, delta, relative)


def _span(req: pb.EnqueueRequest, field: str, now: int) -> int | None:
    """A duration option whose use adds it to a server time: ``now + it`` must be a valid Timestamp."""
    value = duration_ns(req, field)
    if value is not None:
        instant_after(now, value, field)
    return value


def _retry_policy(req: pb.EnqueueRequest) -> RetryPolicy | None:
    if not req.HasField("retry_policy"):
        return None
    rp = req.retry_policy
    return RetryPolicy(
        strategy=int(rp.strategy),
        base=duration_ns(rp, "base", "retry_policy.base") or 0,
        max=duration_ns(rp, "max", "retry_policy.max") or 0,
    )


_NO_TIMES = _Times(None, None, None, None, None, None, None)
_TIME_FIELDS = frozenset(
    {"timeout", "deadline", "process_at", "process_in", "expires_at", "expires_in", "unique_ttl",
     "retention", "retry_policy"}
)  # fmt: skip


def _times(req: pb.EnqueueRequest, now: int, present: frozenset[str]) -> _Times:
    if present.isdisjoint(_TIME_FIELDS):
        return _NO_TIMES
    return _Times(
        timeout=_span(req, "timeout", now),
        deadline=timestamp_ns(req, "deadline"),
        process_at=_relative(req, "process_at", "process_in", now),
        expires_at=_relative(req, "expires_at", "expires_in", now),
        unique_ttl=_span(req, "unique_ttl", now) if req.unique_key else None,
        retention=_span(req, "retention", now),
        retry_policy=_retry_policy(req),
    )


def _policy(value: int) -> FailurePolicy:
    try:
        return FailurePolicy(value) if value else FailurePolicy.BLOCK
    except ValueError:
        return FailurePolicy.BLOCK


def _dependencies(req: pb.EnqueueRequest) -> tuple[Dependency, ...]:
    return tuple([Dependency(d.task_id, _policy(d.on_failure)) for d in req.depends_on])


def build_task(
    req: pb.EnqueueRequest, *, now: int, new_id: Callable[[int], str], default_max_retry: int
) -> Task:
    """Validate ``req`` (upstream checks in upstream order, then sizes, then times) and return the task
    with server defaults applied. Every failure is InvalidArgument; nothing is committed here."""
    queue = req.queue or DEFAULT_QUEUE
    present = frozenset(map(_NAME, map(_FIELD, req.ListFields())))  # C getters: no comprehension frame
    if present <= _PLAIN:  # what a producer sends by default: every option keeps its default
        task_type, payload = req.type, req.payload
        _check_names(task_type, queue, payload)
        task_id, content_type = req.task_id, req.content_type
        if len(task_id) > _SHORT or len(content_type) > _SHORT:
            _check_sizes(req)
        return Task(
            task_id or new_id(now),
            queue,
            task_type,
            now,
            payload,
            content_type,
            {},
            default_max_retry,
            DEFAULT_PRIORITY,
        )
    _check(req, queue, present)
    _check_sizes(req)
    times = _times(req, now, present)
    # Positional, in Task's field order (tests/server_engine/test_build_task.py): twenty keywords
    # cost the call as much again as the arguments.
    return Task(
        req.task_id or new_id(now),  # id
        queue,
        req.type,
        now,  # enqueued_at
        req.payload,
        req.content_type,
        dict(req.metadata) if req.metadata else {},  # dict(map) walks Mapping.keys() in Python
        req.max_retry or default_max_retry,
        req.priority or DEFAULT_PRIORITY,
        times.timeout,
        times.deadline,
        times.process_at,
        req.unique_key,
        times.unique_ttl,
        times.retention,
        req.group,
        times.expires_at,
        _dependencies(req) if req.depends_on else (),  # depends_on
        req.concurrency_key,
        times.retry_policy,
    )
