"""Task rows <-> bytes for the SQLite store (msgpack arrays in a fixed field order).

The payload is not part of the row: it never changes, so the store writes it once, in its own
table, and a state change rewrites only the small row.

Instants and durations (int nanoseconds, see :mod:`..clock`) pass through
:func:`enc_time` / :func:`dec_time` and nowhere else, so a change of the engine's time
type touches only these two functions (and a schema migration that rewrites old rows).
``token`` is not stored: it only orders in-memory index entries and restarts at 0.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec

from conveyor_server_min._engine.clock import from_parts, to_parts
from conveyor_server_min._engine.model import Dependency, FailurePolicy, RetryPolicy, State, Task

__all__ = ["ROW_FORMAT", "dec_time", "decode_task", "enc_time", "encode_task"]

ROW_FORMAT = 1
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()

# Field order of a stored row (format 1). Appending is compatible; anything else needs a migration.
_TIMES = ("enqueued_at", "timeout", "deadline", "process_at", "unique_ttl", "retention", "expires_at",
          "due", "started_at", "completed_at", "lease_expires_at", "unique_until")  # fmt: skip
_PLAIN = ("id", "queue", "type", "content_type", "metadata", "max_retry", "priority",
          "unique_key", "group", "concurrency_key", "retried", "last_error", "progress",
          "progress_message", "result", "lease_id", "session_id", "cancel_requested")  # fmt: skip


_plain = attrgetter(*_PLAIN)
_times = attrgetter(*_TIMES)
_INT64 = 2**63


def enc_time(value: int | None) -> int | list[int] | None:
    """An engine instant or duration (int nanoseconds, or None) as stored.

    Values that fit an int64 (every instant between 1677 and 2262) are stored as they are; the rest
    of the protobuf Timestamp / Duration range as an exact ``[seconds, nanos]`` pair.
    """
    if value is None or -_INT64 <= value < _INT64:
        return value
    return list(to_parts(value))


def dec_time(value: Any) -> int | None:
    """A stored time (see :func:`enc_time`) back as engine nanoseconds."""
    if value is None or type(value) is int:
        return value
    seconds, nanos = value
    if type(seconds) is not int or type(nanos) is not int:
        raise ValueError(f"bad stored time {value!r}")
    return from_parts(seconds, nanos)


def encode_task(task: Task, arrived_at: int | None = None) -> bytes:
    """One row; ``arrived_at`` is the AGGREGATING bucket arrival time (None otherwise)."""
    policy = task.retry_policy
    row: list[Any] = [
        ROW_FORMAT,
        int(task.state),
        _plain(task),
        _times(task),  # fast path: as stored by enc_time while every value fits an int64
        [[d.task_id, int(d.on_failure)] for d in task.depends_on],
        None if policy is None else [policy.strategy, enc_time(policy.base), enc_time(policy.max)],
        {k: int(v) for k, v in task.waiting_on.items()},
        enc_time(arrived_at),
    ]
    try:
        return _encoder.encode(row)
    except OverflowError:
        row[3] = [enc_time(t) for t in row[3]]
        return _encoder.encode(row)


def decode_task(blob: bytes, payload: bytes = b"") -> tuple[Task, Any]:
    """A stored row and its payload back as a Task plus its bucket arrival time; ValueError if malformed."""
    try:
        fmt, state, plain, times, deps, policy, waiting, arrived = _decoder.decode(blob)[:8]
        if fmt != ROW_FORMAT:
            raise ValueError(f"unknown row format {fmt}")
        fields: dict[str, Any] = dict(zip(_PLAIN, plain, strict=True))
        fields.update(zip(_TIMES, (dec_time(t) for t in times), strict=True))
        task = Task(**fields, payload=payload)
        task.state = State(state)
        task.depends_on = tuple(Dependency(d[0], FailurePolicy(d[1])) for d in deps)
        if policy is not None:
            task.retry_policy = RetryPolicy(policy[0], dec_time(policy[1]), dec_time(policy[2]))
        task.waiting_on = {k: FailurePolicy(v) for k, v in waiting.items()}
    except (msgspec.DecodeError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"malformed task row: {exc}") from None
    return task, dec_time(arrived)
