"""Outcome mapping: how a handler's return value or exception becomes a wire outcome.

One set of pure functions shared by every executor (in-loop, threads, child processes):

* return value -> ``SUCCESS``. ``bytes``/``bytearray``/``memoryview`` become the result
  bytes; ``None`` gives empty bytes; a ``str`` is UTF-8 encoded; anything else is
  ``repr()``-ed into bytes (typed apps should return bytes or use their codec).
* :class:`SkipRetry` raised -> ``SKIP_RETRY`` with its message.
* any other exception -> ``RETRY`` with ``"<ExceptionType>: <message> (at <file>:<line> in <function>)"``
  (the innermost frame; the file relative to the current directory when inside it) as the first
  line, then the stack of that exception (the handler's frames, not the SDK's) as a traceback,
  all within :data:`MAX_ERROR_MSG` characters: the message is cut first (the type and location
  are kept), then the outermost frames. That is the task's ``last_error`` on the server, so the
  dashboard and ``conveyor tasks get`` show where it failed; lists show the first line. The
  outcome's ``traceback`` carries the full formatted traceback (at most :data:`MAX_TRACEBACK`
  characters, chained exceptions included) for the worker's log.
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

import logging
import os
import traceback as _tb
from collections.abc import Mapping, Sequence
from typing import Any

from conveyor_sdk._protocol.actions import wire_outcome
from conveyor_sdk._worker.executor import CancelReason, Outcome, OutcomeKind, TaskData

__all__ = [
    "SkipRetry",
    "TaskCancelled",
    "cancelled_outcome",
    "format_traceback",
    "log_failure",
    "log_finished",
    "never_retried",
    "outcome_for_batch_return",
    "outcome_for_exception",
    "outcome_for_return",
    "recorded_error",
    "resolve_cancelled",
]

MAX_ERROR_MSG = 4096
MAX_TRACEBACK = 16384
_SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../conveyor_sdk


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


def _short_path(filename: str) -> str:
    """``shop/tasks.py`` inside the current directory, ``pkg/mod.py`` inside site-packages, else as is."""
    path = os.path.abspath(filename)
    cwd = os.getcwd()
    if path.startswith(cwd + os.sep):
        return os.path.relpath(path, cwd)
    marker = os.sep + "site-packages" + os.sep
    return path.split(marker, 1)[1] if marker in path else filename


def _location(exc: BaseException) -> str:
    """``file:line in function`` of the innermost frame of ``exc``'s traceback ("" without one)."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{_short_path(code.co_filename)}:{tb.tb_lineno} in {code.co_name}"


def _describe(exc: BaseException) -> str:
    """``Type: message (at file:line in fn)``, bounded: the message is cut, the type and location kept."""
    name = type(exc).__name__
    where = _location(exc)
    suffix = f" (at {where})" if where else ""
    message = str(exc)
    if not message:
        return _truncate(name + suffix)
    room = MAX_ERROR_MSG - len(name) - 2 - len(suffix)
    if room < 16:
        return _truncate(f"{name}: {message}{suffix}")
    if len(message) > room:
        message = message[: room - 3] + "..."
    return f"{name}: {message}{suffix}"


def _sdk_frame(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_SDK_DIR + os.sep)


def _handler_frames(exc: BaseException) -> list[_tb.FrameSummary]:
    frames = list(_tb.extract_tb(exc.__traceback__))
    while frames and _sdk_frame(frames[0].filename):
        frames.pop(0)  # invoke/executor frames before the handler's own
    return frames


_TB_HEAD = "Traceback (most recent call last):\n"
_TB_CUT = "  ... (outer frames cut) ...\n"


def recorded_error(exc: BaseException) -> str:
    """What the server records for a failed attempt: the one-line summary, then the exception's
    stack (handler frames only), within :data:`MAX_ERROR_MSG`; outer frames go first when it is long.
    The exception line itself is not repeated: the summary says it."""
    summary = _describe(exc)
    frames = _handler_frames(exc) if exc.__traceback__ is not None else []
    room = MAX_ERROR_MSG - len(summary) - 1 - len(_TB_HEAD)
    if not frames or room < 160:  # not enough left for one frame and its source line
        return summary
    lines = _tb.StackSummary.from_list(frames).format()
    kept: list[str] = []
    used = 0
    for line in reversed(lines):  # innermost first: the frames nearest the failure matter most
        cut = len(_TB_CUT) if len(kept) < len(lines) - 1 else 0
        if used + len(line) + cut > room:
            break
        kept.append(line)
        used += len(line)
    if not kept:
        return summary
    body = "".join(reversed(kept))
    if len(kept) < len(lines):
        body = _TB_CUT + body
    return f"{summary}\n{_TB_HEAD}{body}".rstrip("\n")


def format_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` without the SDK's own leading frames, at most :data:`MAX_TRACEBACK` chars."""
    te = _tb.TracebackException.from_exception(exc)
    frames = list(te.stack)
    while frames and _sdk_frame(frames[0].filename):
        frames.pop(0)  # invoke/executor frames before the handler's own
    te.stack = _tb.StackSummary.from_list(frames)
    text = "".join(te.format())
    if len(text) > MAX_TRACEBACK:
        half = MAX_TRACEBACK // 2
        text = text[:half] + "\n  ... (traceback cut) ...\n" + text[-half:]
    return text


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
    detail = format_traceback(exc) if exc.__traceback__ is not None else ""
    return Outcome(OutcomeKind.RETRY, error_msg=recorded_error(exc), traceback=detail)


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


def failure_fate(task: TaskData | None, outcome: Outcome) -> str:
    """What the server does next: ``retry 2/5``, ``archived after 6 attempts``, ``not retried (archived)``.

    The envelope's ``max_retry`` is the effective budget and the server archives a
    RETRY once ``retried >= max_retry`` (protocol section 4), so the worker can say it.
    """
    if outcome.kind is OutcomeKind.SKIP_RETRY:
        return "not retried (archived)"
    if task is None:
        return "retry"
    if task.retried >= task.max_retry:
        return f"archived after {task.retried + 1} attempts"
    return f"retry {task.retried + 1}/{task.max_retry}"


def log_failure(
    log: logging.Logger, task: TaskData | None, job_id: str, outcome: Outcome, duration: float | None = None
) -> None:
    """One record per failed task: id, type, fate and message; the traceback below it.

    An archived task is logged as an error, one that will be retried as a warning.
    """
    fate = failure_fate(task, outcome)
    task_id = task.id if task is not None else job_id
    type_ = f" ({task.type})" if task is not None else ""
    level = logging.WARNING if fate.startswith("retry") else logging.ERROR
    if not log.isEnabledFor(level):
        return
    took = "" if duration is None else f" (after {duration:.3f}s)"
    record = log.makeRecord(
        log.name, level, __file__, 0, "task %s%s failed, %s: %s%s",
        (task_id, type_, fate, outcome.error_msg.partition("\n")[0], took), None, extra={"task_id": task_id},
    )  # fmt: skip
    if outcome.traceback:
        record.exc_text = outcome.traceback.rstrip("\n")
    log.handle(record)


def never_retried(outcome: Outcome, reason: CancelReason | None) -> Outcome:
    """The outcome of a task type declared ``max_retry=0``: a failed attempt is final (SKIP_RETRY).

    On the wire ``max_retry=0`` means "the server default" (25), so "never retry" can only
    be said by the worker: it reports every RETRY, a timed-out or deadline-cancelled
    attempt included, as SKIP_RETRY. RELEASED (drain) and SUCCESS pass through.
    """
    kind, error_msg, _ = wire_outcome(outcome, reason)
    if kind is not OutcomeKind.RETRY:
        return outcome
    return Outcome(OutcomeKind.SKIP_RETRY, error_msg=error_msg, traceback=outcome.traceback)


def log_abandoned(
    log: logging.Logger, tasks: Sequence[TaskData], job_id: str, duration: float | None
) -> None:
    """One WARNING per task of a job whose session was lost while it ran.

    Its outcome cannot be reported: the server takes the task back with the lost session
    (released, or its lease lapses), so the line must not claim a retry count of ours.
    """
    took = "" if duration is None else f" after {duration:.3f}s"
    for what in [f"{t.id} ({t.type})" for t in tasks] or [job_id]:
        log.warning("task %s abandoned%s: its session was lost; the server hands it out again", what, took)


def log_finished(
    log: logging.Logger,
    task: TaskData | None,
    job_id: str,
    outcome: Outcome,
    *,
    reason: CancelReason | None,
    duration: float | None,
    task_log: bool,
) -> bool:
    """Log one finished task by its wire outcome; True when it was a failed attempt.

    Failures (a timeout, a deadline or a server cancel included) always get a line with
    their fate (:func:`log_failure`); successes and releases get one INFO line each
    unless ``task_log`` is off (very high task rates).
    """
    if outcome.kind is OutcomeKind.SUCCESS and not outcome.cancelled:  # the usual case: wire_outcome's answer
        if task_log and log.isEnabledFor(logging.INFO):
            _log_succeeded(log, task, job_id, duration)
        return False
    kind, error_msg, _ = wire_outcome(outcome, reason)
    if kind is OutcomeKind.RETRY or kind is OutcomeKind.SKIP_RETRY:
        if outcome.cancelled:
            outcome = Outcome(kind, error_msg=error_msg, traceback=outcome.traceback)
        log_failure(log, task, job_id, outcome, duration)
        return True
    if task_log and log.isEnabledFor(logging.INFO):
        if kind is OutcomeKind.SUCCESS:
            _log_succeeded(log, task, job_id, duration)
            return False
        task_id = task.id if task is not None else job_id
        what = f"{task_id} ({task.type})" if task is not None else task_id
        took = "" if duration is None else f" in {duration:.3f}s"
        log.info("task %s released (%s)%s: back to the queue", what, error_msg, took,
                 extra={"task_id": task_id})  # fmt: skip
    return False


# The success line, by (a task known, a duration known). One per task at full rate: the record
# is made directly (no caller lookup, as for log_failure's) and its text is formatted only by a
# handler that writes it.
_SUCCEEDED = {
    (True, True): "task %s (%s) succeeded in %.3fs, retried %s/%s",
    (True, False): "task %s (%s) succeeded, retried %s/%s",
    (False, True): "task %s succeeded in %.3fs",
    (False, False): "task %s succeeded",
}


def _log_succeeded(log: logging.Logger, task: TaskData | None, job_id: str, duration: float | None) -> None:
    """``task ID (TYPE) succeeded in 0.001s, retried 0/25`` at INFO (the caller checked the level)."""
    args: tuple[object, ...]
    if task is not None:
        task_id = task.id
        args = (task_id, task.type) if duration is None else (task_id, task.type, duration)
        args += (task.retried, task.max_retry)
    else:
        task_id = job_id
        args = (job_id,) if duration is None else (job_id, duration)
    msg = _SUCCEEDED[task is not None, duration is not None]
    record = log.makeRecord(log.name, logging.INFO, __file__, 0, msg, args, None, "log_finished")
    record.task_id = task_id
    log.handle(record)
