"""Domain model of the engine: task states, outcomes and the Task record.

Enum numbers equal the conveyor.v1 wire numbers so conversion is a cast, but
nothing here imports protobuf: the engine is storage- and wire-agnostic.
Every instant and duration is an ``int`` of nanoseconds (see :mod:`.clock`).
"""

from __future__ import annotations

import enum
import operator
from dataclasses import dataclass, field, fields

__all__ = [
    "INCOMPLETE",
    "TERMINAL",
    "WAITING",
    "Dependency",
    "EventType",
    "FailurePolicy",
    "Outcome",
    "RetryPolicy",
    "State",
    "Task",
    "TaskEvent",
]


class State(enum.IntEnum):
    """Task lifecycle state (wire numbers of conveyor.v1.TaskState)."""

    SCHEDULED = 1
    PENDING = 2
    ACTIVE = 3
    RETRY = 4
    COMPLETED = 5
    ARCHIVED = 6
    CANCELED = 7
    AGGREGATING = 8
    BLOCKED = 9


WAITING = frozenset({State.SCHEDULED, State.PENDING, State.RETRY, State.BLOCKED})
INCOMPLETE = frozenset(
    {State.SCHEDULED, State.PENDING, State.ACTIVE, State.RETRY, State.AGGREGATING, State.BLOCKED}
)
TERMINAL = frozenset({State.COMPLETED, State.ARCHIVED, State.CANCELED})


class Outcome(enum.IntEnum):
    """Worker-reported Result outcome (wire numbers of conveyor.v1.TaskOutcome)."""

    UNSPECIFIED = 0
    SUCCESS = 1
    RETRY = 2
    SKIP_RETRY = 3
    RELEASED = 4


class FailurePolicy(enum.IntEnum):
    """What a dependent does when a prerequisite fails terminally (UNSPECIFIED = BLOCK)."""

    UNSPECIFIED = 0
    BLOCK = 1
    CASCADE_CANCEL = 2
    CONTINUE = 3


class EventType(enum.IntEnum):
    """Lifecycle transition kinds (wire numbers of conveyor.v1.TaskEventType)."""

    ENQUEUED = 1
    SCHEDULED = 2
    LEASED = 3
    COMPLETED = 4
    RETRIED = 5
    ARCHIVED = 6
    CANCELED = 7
    RELEASED = 8


@dataclass(frozen=True, slots=True)
class Dependency:
    task_id: str
    on_failure: FailurePolicy = FailurePolicy.BLOCK


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Per-task backoff override; zero fields fall back to the server default."""

    strategy: int = 0
    base: int = 0  # nanoseconds
    max: int = 0  # nanoseconds


@dataclass(slots=True, eq=False)
class Task:
    """One task row. Mutable; only the broker and engine change it.

    Instants (``*_at``, ``deadline``, ``due``, ``unique_until``) are epoch nanoseconds and
    durations (``timeout``, ``unique_ttl``, ``retention``) nanoseconds, all ``int``.
    """

    id: str
    queue: str
    type: str
    enqueued_at: int
    payload: bytes = b""
    content_type: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    max_retry: int = 25
    priority: int = 4
    timeout: int | None = None
    deadline: int | None = None
    process_at: int | None = None
    unique_key: str = ""
    unique_ttl: int | None = None
    retention: int | None = None
    group: str = ""
    expires_at: int | None = None
    depends_on: tuple[Dependency, ...] = ()
    concurrency_key: str = ""
    retry_policy: RetryPolicy | None = None
    # runtime
    state: State = State.PENDING
    due: int = 0
    retried: int = 0
    last_error: str = ""
    started_at: int | None = None
    completed_at: int | None = None
    progress: int = 0
    progress_message: str = ""
    result: bytes = b""
    lease_id: int = 0
    lease_expires_at: int = 0
    session_id: str = ""
    cancel_requested: bool = False
    unique_until: int | None = None
    waiting_on: dict[str, FailurePolicy] = field(default_factory=dict)
    token: int = 0
    # dispatch hints, in memory only (a restart forgets them, which only loses a preference):
    lapsed_in: str = ""  # session whose lease on this task lapsed last (not offered it straight back)
    lapsed_at: int = 0  # when that lease lapsed
    silent_releases: int = 0  # times released because its session went silent (see close_silent)
    mute_releases: int = 0  # of those, from sessions that never spoke after their Hello (memory only)

    def __repr__(self) -> str:
        return f"Task(id={self.id!r}, queue={self.queue!r}, type={self.type!r}, state={self.state.name})"

    def snapshot(self) -> Task:
        """A copy of the row as it is now, unaffected by later changes to this one (its dicts are
        copied; every other field is immutable)."""
        copy = Task(*_task_values(self))
        copy.metadata = dict(self.metadata)
        copy.waiting_on = dict(self.waiting_on)
        return copy


_task_values = operator.attrgetter(*(f.name for f in fields(Task)))  # in __init__ order


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """A lifecycle transition, as streamed by WatchEvents."""

    id: str
    queue: str
    type: str
    state: State
    event_type: EventType
    occurred_at: int
    attempt: int
    last_error: str
