"""Outcome mapping: how a handler's return value or exception becomes a wire outcome.

One set of pure functions shared by every executor (in-loop, threads, child processes):

* return value -> ``SUCCESS``. ``bytes``/``bytearray``/``memoryview`` become the result
  bytes; ``None`` gives empty bytes; a ``str`` is UTF-8 encoded; anything else is
  ``repr()``-ed into bytes (typed apps should return bytes or use their codec).
* :class:`SkipRetry` raised -> ``SKIP_RETRY`` with its message.
* any other exception -> ``RETRY`` with ``"<ExceptionType>: <message>"``.
* ``BaseException`` subclasses (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``)
  -> ``RETRY`` as well; a task always gets a Result.
* a handler interrupted by cancellation -> ``Outcome(RETRY, cancelled=True)``; the
  core resolves it by :class:`CancelReason` with :func:`resolve_cancelled`
  (DEADLINE -> RETRY "deadline exceeded", SERVER_CANCEL -> RETRY "canceled by server",
  DRAIN -> RELEASED).

Batch handlers may return ``None`` (every member SUCCESS), a sequence with one entry
per member (in member order), or a mapping ``{task_id: entry}`` (missing members get
SUCCESS). Each entry is an :class:`Outcome`, an exception instance (mapped as if
raised), or a plain return value (mapped like a single handler's return).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conveyor_sdk._protocol.actions import wire_outcome
from conveyor_sdk._worker.executor import CancelReason, Outcome, OutcomeKind, TaskData

__all__ = [
    "SkipRetry",
    "TaskCancelled",
    "cancelled_outcome",
    "outcome_for_batch_return",
    "outcome_for_exception",
    "outcome_for_return",
    "resolve_cancelled",
]

MAX_ERROR_MSG = 4096


class SkipRetry(Exception):
    """Raise from a handler to fail the task permanently (``SKIP_RETRY``): no more retries."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class TaskCancelled(BaseException):
    """Raised by ``ctx.raise_if_cancelled()``; a BaseException so broad ``except Exception`` lets it pass."""

    def __init__(self, reason: CancelReason | None) -> None:
        super().__init__(f"task cancelled ({reason.value if reason else 'unknown'})")
        self.reason = reason


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_ERROR_MSG else text[: MAX_ERROR_MSG - 3] + "..."


def _describe(exc: BaseException) -> str:
    message = str(exc)
    name = type(exc).__name__
    return _truncate(f"{name}: {message}" if message else name)


def outcome_for_return(value: Any) -> Outcome:
    """Map a handler's return value to a SUCCESS outcome (see module docstring)."""
    if isinstance(value, Outcome):
        return value
    if value is None:
        return Outcome(OutcomeKind.SUCCESS)
    if isinstance(value, bytes):
        return Outcome(OutcomeKind.SUCCESS, result=value)
    if isinstance(value, bytearray | memoryview):
        return Outcome(OutcomeKind.SUCCESS, result=bytes(value))
    if isinstance(value, str):
        return Outcome(OutcomeKind.SUCCESS, result=value.encode())
    return Outcome(OutcomeKind.SUCCESS, result=repr(value).encode())


def outcome_for_exception(exc: BaseException) -> Outcome:
    """Map a raised exception: SkipRetry -> SKIP_RETRY, TaskCancelled -> cancelled, else RETRY."""
    if isinstance(exc, SkipRetry):
        return Outcome(OutcomeKind.SKIP_RETRY, error_msg=_truncate(exc.message or _describe(exc)))
    if isinstance(exc, TaskCancelled):
        return cancelled_outcome()
    return Outcome(OutcomeKind.RETRY, error_msg=_describe(exc))


def cancelled_outcome() -> Outcome:
    """The outcome of a handler that stopped because its job was cancelled."""
    return Outcome(OutcomeKind.RETRY, error_msg="canceled", cancelled=True)


def resolve_cancelled(outcome: Outcome, reason: CancelReason | None) -> Outcome:
    """Turn a ``cancelled=True`` outcome into what goes on the wire, by the core's cancel reason.

    Non-cancelled outcomes pass through (a handler that finished despite a cancel
    request reports its real outcome). ``UNSPECIFIED`` is never sent: it becomes
    RELEASED (upstream servers end the session on an UNSPECIFIED outcome). Same
    rules as the session machine (:func:`conveyor_sdk._protocol.actions.wire_outcome`).
    """
    kind, error_msg, result = wire_outcome(outcome, reason)
    return Outcome(kind, error_msg=error_msg, result=result)


def _entry_outcome(entry: Any) -> Outcome:
    if isinstance(entry, Outcome):
        return entry
    if isinstance(entry, BaseException):
        return outcome_for_exception(entry)
    return outcome_for_return(entry)


def outcome_for_batch_return(value: Any, tasks: Sequence[TaskData]) -> list[Outcome]:
    """Map a batch handler's return value to one outcome per member, in member order."""
    if value is None:
        return [Outcome(OutcomeKind.SUCCESS) for _ in tasks]
    if isinstance(value, Mapping):
        unknown = set(value) - {t.id for t in tasks}
        if unknown:
            msg = f"batch handler returned outcomes for unknown task ids: {sorted(unknown)[:5]}"
            return [Outcome(OutcomeKind.RETRY, error_msg=msg) for _ in tasks]
        return [_entry_outcome(value.get(t.id)) for t in tasks]
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        if len(value) != len(tasks):
            msg = f"batch handler returned {len(value)} outcomes for {len(tasks)} tasks"
            return [Outcome(OutcomeKind.RETRY, error_msg=msg) for _ in tasks]
        return [_entry_outcome(entry) for entry in value]
    msg = f"batch handler returned {type(value).__name__}; expected None, a sequence or a mapping"
    return [Outcome(OutcomeKind.RETRY, error_msg=msg) for _ in tasks]
