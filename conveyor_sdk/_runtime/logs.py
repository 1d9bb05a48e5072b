"""Log formatting for the supervisor and its children: text or one JSON object per line.

Every record carries ``child`` (``"<index>:<pid>"`` inside a child, ``"supervisor"``
otherwise) and ``task_id`` (the running job inside a child, else whatever the caller
passed with ``extra={"task_id": ...}``), so interleaved output stays attributable.
"""

from __future__ import annotations

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


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, child, task_id, extras, exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
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

    def format(self, record: logging.LogRecord) -> str:
        task_id = getattr(record, "task_id", "")
        record.task_part = f" {task_id}" if task_id else ""
        return super().format(record)


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
    handler: logging.StreamHandler[Any] = logging.StreamHandler(
        stream if stream is not None else _CurrentStderr()
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
