"""Typed value objects of the producer/operator API (frozen, slotted, no I/O).

Wire enums are mirrored as :class:`enum.IntEnum` with the same numbers as the
``conveyor.v1`` protos, so ``TaskState.PENDING == 2`` on both sides; they print
their names like any enum (``print(info.state)`` shows ``TaskState.ACTIVE``;
``repr`` stays ``<TaskState.ACTIVE: 3>``; ``.name`` is ``"ACTIVE"``).
Timestamps are timezone-aware :class:`~datetime.datetime` values in UTC, or
``None`` when the server left them unset.
"""

from __future__ import annotations

import builtins
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:
    from conveyor_sdk.codecs import CodecRegistry

__all__ = [
    "Dependency",
    "Duration",
    "EnqueueResult",
    "OnFailure",
    "QueueInfo",
    "RetryPolicy",
    "RetryStrategy",
    "TaskActionResult",
    "TaskInfo",
    "TaskPage",
    "TaskState",
    "WorkerSessionInfo",
]

T = TypeVar("T")

#: A duration option: seconds as a number, or a :class:`~datetime.timedelta`.
Duration = float | int | timedelta


class _NamedIntEnum(enum.IntEnum):
    """An IntEnum that prints like every other enum: ``str(TaskState.ACTIVE) == "TaskState.ACTIVE"``.

    Plain IntEnums print their number (``3``). Comparisons, ``int()``,
    JSON/msgpack encoding and ``repr`` are unchanged; only ``str()`` and
    ``format()`` (f-strings, ``print``) show the name.
    """

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, format_spec: str) -> str:
        return format(str(self), format_spec)


class TaskState(_NamedIntEnum):
    """Lifecycle state of a task (numbers match ``conveyor.v1.TaskState``)."""

    UNSPECIFIED = 0
    SCHEDULED = 1
    PENDING = 2
    ACTIVE = 3
    RETRY = 4
    COMPLETED = 5
    ARCHIVED = 6
    CANCELED = 7
    AGGREGATING = 8
    BLOCKED = 9

    @property
    def is_terminal(self) -> bool:
        """True for COMPLETED, ARCHIVED and CANCELED."""
        return self in (TaskState.COMPLETED, TaskState.ARCHIVED, TaskState.CANCELED)

    @classmethod
    def parse(cls, text: str) -> TaskState:
        """Accept ``pending``, ``PENDING`` or ``TASK_STATE_PENDING``; ValueError otherwise."""
        name = text.strip().upper().removeprefix("TASK_STATE_")
        try:
            return cls[name]
        except KeyError:
            choices = ", ".join(s.name.lower() for s in cls if s is not cls.UNSPECIFIED)
            raise ValueError(f"unknown task state {text!r}; choose one of: {choices}") from None

    @classmethod
    def from_wire(cls, number: int) -> TaskState:
        """Map a wire number; unknown (newer) numbers become UNSPECIFIED."""
        try:
            return cls(number)
        except ValueError:
            return cls.UNSPECIFIED


class OnFailure(_NamedIntEnum):
    """What happens to a dependent when its prerequisite fails terminally."""

    BLOCK = 1
    CASCADE_CANCEL = 2
    CONTINUE = 3


class RetryStrategy(_NamedIntEnum):
    """Per-task retry backoff kind; DEFAULT leaves the server's configured kind."""

    DEFAULT = 0
    EXPONENTIAL = 1
    LINEAR = 2
    FIXED = 3


@dataclass(frozen=True, slots=True)
class Dependency:
    """A prerequisite task and the policy applied if it fails."""

    task_id: str
    on_failure: OnFailure = OnFailure.BLOCK


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Override the server's retry backoff for one task.

    ``base``/``max`` are seconds or timedeltas; ``None`` keeps the server default.
    """

    strategy: RetryStrategy = RetryStrategy.DEFAULT
    base: Duration | None = None
    max: Duration | None = None


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """The externally visible view of one task (GetTask / Enqueue / ListTasks)."""

    id: str
    queue: str
    type: str
    state: TaskState
    priority: int = 0
    retried: int = 0
    max_retry: int = 0
    last_error: str = ""
    enqueued_at: datetime | None = None
    process_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    payload: bytes = b""
    content_type: str = ""
    progress: int = 0
    progress_message: str = ""

    @overload
    def decode(self, type_: builtins.type[T], *, codecs: CodecRegistry | None = None) -> T: ...

    @overload
    def decode(self, type_: Any = ..., *, codecs: CodecRegistry | None = None) -> Any: ...

    def decode(self, type_: Any = Any, *, codecs: CodecRegistry | None = None) -> Any:
        """Decode ``payload`` through its ``content_type`` codec into ``type_``."""
        from conveyor_sdk.codecs import CodecRegistry

        registry = codecs if codecs is not None else CodecRegistry.default()
        return registry.decode(self.payload, self.content_type, type_)


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """One item of an EnqueueBatch answer: the committed task, or why it failed."""

    task: TaskInfo | None
    error: str = ""

    @property
    def ok(self) -> bool:
        """True when the item was committed."""
        return self.task is not None and not self.error


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue with its pause flag and per-state counts."""

    name: str
    paused: bool
    counts: Mapping[TaskState, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Sum of all state counts."""
        return sum(self.counts.values())


@dataclass(frozen=True, slots=True)
class WorkerSessionInfo:
    """A connected worker session as the server sees it."""

    id: str
    queues: tuple[str, ...]
    concurrency: int
    sdk_version: str
    connected_at: datetime | None


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of ListTasks; pass ``next_page_token`` to get the next one ("" = last page)."""

    tasks: tuple[TaskInfo, ...]
    next_page_token: str = ""


@dataclass(frozen=True, slots=True)
class TaskActionResult:
    """Per-id outcome of a batch task action ("" error = success)."""

    id: str
    error: str = ""
