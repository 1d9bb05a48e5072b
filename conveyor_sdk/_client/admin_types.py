"""Typed values of the operator surface beyond tasks and queues (frozen, slotted, no I/O).

Re-exported by :mod:`conveyor_sdk.client`. Timestamps are aware UTC datetimes or ``None``;
durations are :class:`~datetime.timedelta` or ``None`` when the server left them unset.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from conveyor_sdk.types import RetryPolicy, TaskState

__all__ = [
    "BrokerInfo",
    "ClusterNode",
    "ConcurrencyLimit",
    "CronEntry",
    "GroupConfig",
    "RateLimit",
    "ServerVersion",
    "TaskEvent",
    "TaskEventType",
]


class TaskEventType(enum.IntEnum):
    """Lifecycle event kinds of ``WatchEvents`` (numbers match ``conveyor.v1.TaskEventType``)."""

    UNSPECIFIED = 0
    ENQUEUED = 1
    SCHEDULED = 2
    LEASED = 3
    COMPLETED = 4
    RETRIED = 5
    ARCHIVED = 6
    CANCELED = 7
    RELEASED = 8

    @classmethod
    def parse(cls, text: str) -> TaskEventType:
        """Accept ``leased``, ``LEASED`` or ``TASK_EVENT_TYPE_LEASED``; ValueError otherwise."""
        name = text.strip().upper().removeprefix("TASK_EVENT_TYPE_")
        if name in cls.__members__ and name != "UNSPECIFIED":
            return cls[name]
        choices = ", ".join(t.name.lower() for t in cls if t is not cls.UNSPECIFIED)
        raise ValueError(f"unknown event type {text!r}; choose one of: {choices}")

    @classmethod
    def from_wire(cls, number: int) -> TaskEventType:
        """Map a wire number; unknown (newer) numbers become UNSPECIFIED."""
        try:
            return cls(number)
        except ValueError:
            return cls.UNSPECIFIED


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One lifecycle transition from ``WatchEvents``."""

    id: str
    queue: str
    type: str
    state: TaskState
    event_type: TaskEventType
    occurred_at: datetime | None = None
    attempt: int = 0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class CronEntry:
    """A recurring task definition; ``next_run_at`` is None until the server arms the entry."""

    id: str
    spec: str
    type: str
    queue: str
    payload: bytes = b""
    content_type: str = ""
    paused: bool = False
    next_run_at: datetime | None = None
    priority: int = 0
    max_retry: int = 0
    timeout: timedelta | None = None
    retention: timedelta | None = None
    deadline: datetime | None = None
    expires_at: datetime | None = None
    group: str = ""
    concurrency_key: str = ""
    retry_policy: RetryPolicy | None = None
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A per-queue dispatch rate override (token bucket)."""

    queue: str
    rate_per_sec: float
    burst: int


@dataclass(frozen=True, slots=True)
class ConcurrencyLimit:
    """Most tasks sharing one ``concurrency_key`` that may be active at once on ``queue``."""

    queue: str
    max_active: int


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Aggregation thresholds for one group of a queue (``group == ""``: the queue-wide default)."""

    queue: str
    group: str
    max_size: int
    max_delay: timedelta | None
    grace_period: timedelta | None


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """One server node of ``ClusterInfo``."""

    address: str
    started_at: datetime | None


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """The storage driver and its free-form metrics (names and meaning vary by server)."""

    driver: str
    metrics: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServerVersion:
    """What the server says about itself in ``Welcome`` (see ``Admin.server_version``)."""

    server_version: str
    min_sdk_version: str
