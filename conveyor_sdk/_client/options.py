"""Enqueue options: the typed keyword set, client-side validation, and the EnqueueRequest builder.

Pure functions (no I/O, no clock). Every rule the server would enforce with
``invalid_argument`` (protocol §6.1) is checked here first and raised as a
:class:`ValidationError`, which is both a ``ValueError`` and an
``InvalidArgument`` of the SDK error tree. ``process_in``/``expires_in`` are
sent as durations; the server resolves them against its own clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import InvalidArgument
from conveyor_sdk.types import Dependency, Duration, OnFailure, RetryPolicy, RetryStrategy

if TYPE_CHECKING:
    from conveyor_sdk.codecs import CodecRegistry

__all__ = [
    "MAX_BATCH",
    "MAX_DEPENDENCIES",
    "MAX_PAYLOAD",
    "EnqueueOptions",
    "TaskSpec",
    "ValidationError",
    "build_request",
    "check_batch_size",
    "check_option_names",
    "validate_queue",
]

MAX_PAYLOAD = 1 << 20
MAX_BATCH = 1000
MAX_DEPENDENCIES = 1000
QUEUE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")


class ValidationError(InvalidArgument, ValueError):
    """An option the server would reject, caught before any network call."""

    def __str__(self) -> str:
        return self.message

    @property
    def path(self) -> str | None:
        """For a typed payload that does not match its type: the bad field (``$.order_id``)."""
        path = self.details.get("path")
        return path if isinstance(path, str) else None


class EnqueueOptions(TypedDict, total=False):
    """Every per-task enqueue option (protocol §6.1), all optional and keyword-only."""

    task_id: str
    queue: str
    content_type: str
    metadata: Mapping[str, str]
    max_retry: int
    timeout: Duration
    deadline: datetime
    process_at: datetime
    process_in: Duration
    unique_key: str
    unique_ttl: Duration
    priority: int
    retention: Duration
    group: str
    expires_in: Duration
    expires_at: datetime
    depends_on: Sequence[str | Dependency]
    concurrency_key: str
    retry_policy: RetryPolicy


OPTION_NAMES = frozenset(EnqueueOptions.__optional_keys__ | EnqueueOptions.__required_keys__)
_DURATIONS = ("timeout", "process_in", "unique_ttl", "retention", "expires_in")
_TIMESTAMPS = ("deadline", "process_at", "expires_at")
_STRINGS = ("task_id", "queue", "unique_key", "group", "concurrency_key")
_STRING_SET = frozenset(_STRINGS)
_SCALAR_KIND = {
    **dict.fromkeys((*_STRINGS, "max_retry", "priority"), "plain"),
    **dict.fromkeys(_DURATIONS, "duration"),
    **dict.fromkeys(_TIMESTAMPS, "timestamp"),
}
_EXCLUSIVE = (
    ("process_at", "process_in"),
    ("expires_at", "expires_in"),
    ("group", "process_at"),
    ("group", "process_in"),
    ("group", "concurrency_key"),
)


def check_option_names(options: Mapping[str, Any]) -> None:
    """TypeError for an unknown option name (a typo must not be silently dropped)."""
    if OPTION_NAMES.issuperset(options):
        return
    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:
        raise TypeError(f"unknown enqueue option(s): {', '.join(unknown)}")


class TaskSpec:
    """One task to enqueue in a batch or transaction: type, payload value and options.

    The payload is encoded when the request is built (bytes are sent verbatim).
    """

    __slots__ = ("encryption", "options", "payload", "type")

    def __init__(self, type: str, payload: Any = None, /, **options: Unpack[EnqueueOptions]) -> None:
        check_option_names(options)
        self.type = type
        self.payload = payload
        self.options: EnqueueOptions = options
        self.encryption: Any = None  # set by a typed task whose App seals (used when the client does not)

    @property
    def task_id(self) -> str | None:
        """The client-assigned id, if any."""
        return self.options.get("task_id")

    def __repr__(self) -> str:
        return f"TaskSpec({self.type!r}, options={dict(self.options)!r})"


def validate_queue(queue: str) -> str:
    """Return ``queue`` or raise when it does not match the queue-name rule."""
    if not QUEUE_NAME.match(queue):
        raise ValidationError(f"invalid queue name {queue!r}: must match {QUEUE_NAME.pattern}")
    return queue


def check_batch_size(count: int, what: str) -> None:
    """1..1000 items, like the server."""
    if count < 1:
        raise ValidationError(f"{what} must contain at least one task")
    if count > MAX_BATCH:
        raise ValidationError(f"{what} holds {count} tasks, the maximum is {MAX_BATCH}; split it")


def to_timedelta(name: str, value: Duration) -> timedelta:
    """A non-negative timedelta from seconds or a timedelta."""
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        kind = type(value).__name__
        raise ValidationError(f"{name} must be seconds (int/float) or a timedelta, got {kind}")
    delta = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if delta < timedelta(0):
        raise ValidationError(f"{name} must not be negative, got {value!r}")
    return delta


def to_aware(name: str, value: datetime) -> datetime:
    """Refuse naive datetimes: the wire carries instants, and guessing a zone loses tasks."""
    if not isinstance(value, datetime):
        raise ValidationError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(
            f"{name} is a naive datetime; pass a timezone-aware one, e.g. datetime.now(timezone.utc)"
        )
    return value


def _check_exclusive(options: Mapping[str, Any]) -> None:
    if len(options) < 2:
        return
    for first, second in _EXCLUSIVE:
        if options.get(first) is not None and options.get(second) is not None:
            raise ValidationError(f"{first} and {second} are mutually exclusive")


def _check_ints(options: Mapping[str, Any]) -> None:
    max_retry = options.get("max_retry")
    if max_retry is not None:
        if isinstance(max_retry, bool) or not isinstance(max_retry, int):
            raise ValidationError(f"max_retry must be an int, got {max_retry!r}")
        if max_retry < 0:
            raise ValidationError(f"max_retry must not be negative, got {max_retry}")
        if max_retry == 0:  # on the wire 0 is "server default (25)": never let it mean that silently
            raise ValidationError(
                "max_retry=0 would mean the server default (25 retries); omit max_retry for that, or "
                "declare the task type never-retry with @app.task(..., max_retry=0), or raise SkipRetry"
            )
    priority = options.get("priority")
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValidationError(f"priority must be an int, got {priority!r}")
        if not 0 <= priority <= 9:
            raise ValidationError(f"priority must be in 0..9 (0 = default), got {priority}")


def _check_strings(options: Mapping[str, Any]) -> None:
    for name, value in options.items():
        if value is None or name not in _STRING_SET:
            continue
        if not isinstance(value, str):
            raise ValidationError(f"{name} must be a str, got {type(value).__name__}")
        if not value:
            raise ValidationError(f"{name} must not be empty when given (omit it instead)")
    queue = options.get("queue")
    if queue is not None:
        validate_queue(queue)


def _wire_enum(value: int) -> Any:
    """Our IntEnum as the generated enum's int (the stubs type those as distinct classes)."""
    return int(value)


def _dependencies(value: Any) -> list[tpb.TaskDependency]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValidationError("depends_on must be a list of task ids or Dependency objects")
    if len(value) > MAX_DEPENDENCIES:
        raise ValidationError(f"a task may depend on at most {MAX_DEPENDENCIES} tasks, got {len(value)}")
    out = []
    for item in value:
        dep = Dependency(item) if isinstance(item, str) else item
        if not isinstance(dep, Dependency):
            raise ValidationError(f"depends_on items must be str or Dependency, got {type(item).__name__}")
        if not dep.task_id:
            raise ValidationError("a dependency must name a task id")
        out.append(tpb.TaskDependency(task_id=dep.task_id, on_failure=_wire_enum(OnFailure(dep.on_failure))))
    return out


def _metadata(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValidationError("metadata must be a mapping of str to str")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ValidationError(f"metadata keys and values must be str, got {key!r}: {item!r}")
    return dict(value)


def _retry_policy(value: Any) -> tpb.RetryPolicy:
    if not isinstance(value, RetryPolicy):
        raise ValidationError(f"retry_policy must be a RetryPolicy, got {type(value).__name__}")
    msg = tpb.RetryPolicy(strategy=_wire_enum(RetryStrategy(value.strategy)))
    if value.base is not None:
        msg.base.FromTimedelta(to_timedelta("retry_policy.base", value.base))
    if value.max is not None:
        msg.max.FromTimedelta(to_timedelta("retry_policy.max", value.max))
    return msg


def _apply_scalars(req: pb.EnqueueRequest, options: Mapping[str, Any]) -> None:
    for name, value in options.items():
        kind = _SCALAR_KIND.get(name)
        if kind is None or value is None:
            continue
        if kind == "plain":
            setattr(req, name, value)
        elif kind == "duration":
            getattr(req, name).FromTimedelta(to_timedelta(name, value))
        else:
            getattr(req, name).FromDatetime(to_aware(name, value))


def _apply_structured(req: pb.EnqueueRequest, options: Mapping[str, Any]) -> None:
    if options.get("metadata"):
        req.metadata.update(_metadata(options["metadata"]))
    if options.get("depends_on"):
        req.depends_on.extend(_dependencies(options["depends_on"]))
    if options.get("retry_policy") is not None:
        req.retry_policy.CopyFrom(_retry_policy(options["retry_policy"]))


def build_request(
    type: str, payload: Any, options: Mapping[str, Any], codecs: CodecRegistry
) -> pb.EnqueueRequest:
    """Validate everything and build the wire request (raises ValidationError / CodecError)."""
    check_option_names(options)
    if not isinstance(type, str) or not type:
        raise ValidationError("task type is required (a non-empty str)")
    _check_strings(options)
    _check_exclusive(options)
    _check_ints(options)
    data, content_type = codecs.encode(payload, options.get("content_type"))
    if len(data) > MAX_PAYLOAD:
        raise ValidationError(f"payload is {len(data)} bytes, the maximum is {MAX_PAYLOAD}")
    req = pb.EnqueueRequest(type=type, payload=data, content_type=content_type)
    _apply_scalars(req, options)
    _apply_structured(req, options)
    return req
