"""Log formatting for the supervisor and its children: text or one JSON object per line.

Every record carries ``child`` (``"<index>:<pid>"`` inside a child, ``"supervisor"``
otherwise) and ``task_id`` (the running job inside a child, else whatever the caller
passed with ``extra={"task_id": ...}``), so interleaved output stays attributable.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

__all__ = [
    "LEVELS",
    "QUIET_LOGGERS",
    "JsonFormatter",
    "TextFormatter",
    "TurnHandler",
    "configure_logging",
    "parse_level",
    "quiet_third_party",
]

LEVELS = ("debug", "info", "warning", "error")


def parse_level(name: str) -> int:
    """``"warning"`` -> ``logging.WARNING``; ValueError naming the choices otherwise."""
    if name.lower() not in LEVELS:
        raise ValueError(f"--log-level must be one of {', '.join(LEVELS)}, got {name!r}")
    return int(getattr(logging, name.upper()))


_STD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class _Defaults(logging.Filter):
    def __init__(self, child: str) -> None:
        super().__init__()
        self.child = child

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "child"):
            record.child = self.child
        if not hasattr(record, "task_id"):
            record.task_id = ""
        return True


class _SecondCache:
    """The text of one whole second, remembered: records come many per second (one per task)."""

    __slots__ = ("_at", "_convert", "_pattern", "_text")

    def __init__(self, pattern: str, convert: Any) -> None:
        self._pattern, self._convert = pattern, convert
        self._at, self._text = -1, ""

    def __call__(self, created: float) -> str:
        second = int(created)
        if second != self._at:  # time zones move by whole seconds, so one second has one text
            self._text = time.strftime(self._pattern, self._convert(second))
            self._at = second
        return self._text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, child, task_id, extras, exc."""

    def __init__(self) -> None:
        super().__init__()
        self._second = _SecondCache("%Y-%m-%dT%H:%M:%S", time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": f"{self._second(record.created)}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "child": getattr(record, "child", ""),
            "task_id": getattr(record, "task_id", ""),
        }
        for key, value in record.__dict__.items():
            if key not in _STD and key not in out and not key.startswith("_"):
                out[key] = value if isinstance(value, str | int | float | bool | None) else repr(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:  # a traceback formatted elsewhere (a child, a failed task)
            out["exc"] = record.exc_text
        return json.dumps(out, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time level [child task] logger: message``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s [%(child)s%(task_part)s] %(name)s: %(message)s")
        self._second = _SecondCache(self.default_time_format, self.converter)

    def format(self, record: logging.LogRecord) -> str:
        task_id = getattr(record, "task_id", "")
        record.task_part = f" {task_id}" if task_id else ""
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)  # logging's own steps, which append the traceback
        # logging.Formatter.format for a record without a traceback, in one frame: the supervisor
        # formats a record per task, and this format always shows the time.
        record.message = record.getMessage()
        record.asctime = self.formatTime(record)
        return self.formatMessage(record)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """logging's own text (``2026-12-02 16:37:01,123``), its second formatted once per second."""
        return f"{self._second(record.created)},{int(record.msecs):03d}"

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The format string above, written out: the supervisor formats one of these per task."""
        # record.child is set by _Defaults (or by a child's filter) before any record gets here.
        return (
            f"{record.asctime} {record.levelname:<7} [{record.child}{record.task_part}] "  # type: ignore[attr-defined]
            f"{record.name}: {record.message}"
        )


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is now (the live view swaps in a proxy that prints above it)."""

    def write(self, text: str) -> int:
        from conveyor_sdk._runtime.output import write_output

        return write_output(text)

    def flush(self) -> None:
        sys.stderr.flush()


class _Marked(logging.Formatter):
    """Wraps a formatter: marks where a record starts and its continuation lines (see ``output.py``)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        from conveyor_sdk._runtime.output import mark_record

        return mark_record(self.inner.format(record))


class TurnHandler(logging.StreamHandler[Any]):
    """A stream handler that writes the records of one event-loop turn together, at the turn's end.

    The supervisor logs a line per finished task: written one by one, each line was its own
    write (and flush) to stderr, a system call per task on the supervisor's busy loop. Here a
    record logged on a running loop waits until that loop's turn is over (``call_soon``), and
    the turn's records leave in one write. Nothing is reordered: a record from anywhere else
    (another thread, another loop, no loop) first writes what waits, then itself; ``flush()``
    (also called by ``logging.shutdown`` at exit) writes what waits, and so does a full batch.
    """

    MAX_BATCH = 256  # records; bounds what a turn that logs a lot holds back

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._pending: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # where the pending batch's flush runs
        self._last: logging.LogRecord | None = None  # for handleError, should the batch's write fail

    def emit(self, record: logging.LogRecord) -> None:
        # Called with self.lock held (Handler.handle), so _pending is never shared unlocked.
        try:
            text = self.format(record) + self.terminator
            try:
                loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is None or (self._loop is not None and loop is not self._loop):
                self._write_pending()
                self._write(text)
                if self._loop is not None and self._loop.is_closed():  # its flush will never run
                    self._loop = None
                return
            self._pending.append(text)
            self._last = record
            if self._loop is None:
                self._loop = loop
                loop.call_soon(self.flush)
            elif len(self._pending) >= self.MAX_BATCH:
                self._write_pending()
        except RecursionError:
            raise
        except Exception:  # logging's own contract: a failing handler reports, never raises
            self.handleError(record)

    def flush(self) -> None:
        """Write the records that wait (the turn ended, or logging shuts down), then flush the stream."""
        with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
            self._loop = None
            try:
                self._write_pending()
            except Exception:  # as in emit: report through logging's handleError
                if self._last is not None:
                    self.handleError(self._last)
            super().flush()

    def _write_pending(self) -> None:
        if self._pending:
            text, self._pending = "".join(self._pending), []
            self._write(text)

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def configure_logging(
    fmt: str = "text",
    *,
    child: str = "supervisor",
    level: int = logging.INFO,
    stream: IO[str] | None = None,
    marked: bool = False,
) -> None:
    """Route the root logger to ``stream`` (default: the current stderr) in ``fmt`` ("text" or "json").

    ``marked``: records are framed for the supervisor's forwarder (a child under the live view).
    Python warnings are logged too (``py.warnings``).
    """
    # The supervisor (stream None) logs a line per task from its loop: its records leave a turn at a
    # time (TurnHandler). A child writes each record at once: it may exit right after a record.
    handler: logging.StreamHandler[Any] = (
        logging.StreamHandler(stream) if stream is not None else TurnHandler(_CurrentStderr())
    )
    formatter: logging.Formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    handler.setFormatter(_Marked(formatter) if marked else formatter)
    handler.addFilter(_Defaults(child))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    quiet_third_party(level)
    logging.captureWarnings(True)


# HTTP/2 libraries log every header block at DEBUG: at --log-level debug they were most of the
# output (37 of 43 lines from hpack). They stay at INFO unless named in CONVEYOR_DEBUG_LOGGERS.
QUIET_LOGGERS = ("hpack", "h2")


def quiet_third_party(level: int, env: Mapping[str, str] = os.environ) -> None:
    """Keep :data:`QUIET_LOGGERS` at INFO or above unless ``CONVEYOR_DEBUG_LOGGERS`` names them."""
    asked = {name.strip() for name in env.get("CONVEYOR_DEBUG_LOGGERS", "").split(",")}
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(level if name in asked else max(level, logging.INFO))
