"""Output of handler code: every line reaches the operator, attributed to its child and task.

In a child, ``print`` and writes to ``sys.stderr`` become log records
(:class:`LogStream`: ``conveyor.stdout`` at INFO, ``conveyor.stderr`` at WARNING,
one record per line, per thread), so they carry ``child`` and ``task_id`` like
``logging`` calls and warnings (``py.warnings``), and ``--log-format json`` stays
one JSON object per line.

Under the live view (stderr is a TTY) children do not write to the terminal: their
file descriptors 1 and 2 are one pipe the supervisor reads (:class:`ChildOutput`),
and every line is printed above the live table (rich prints above a ``Live``
region; writing to the terminal behind its back is what garbles it). Records are
framed: the first line of a record starts with :data:`RECORD`, its continuation
lines (a traceback) with :data:`CONTINUED`; anything else was written to the
descriptors directly (C code, a subprocess, a crash dump) and is prefixed with
``[<child>:<pid>]``. Partial lines are kept until their end (at most
:data:`MAX_LINE` characters, then cut), and flushed when the pipe closes, so
nothing is lost.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterable

__all__ = ["CONTINUED", "MAX_LINE", "RECORD", "ChildOutput", "LogStream", "mark_record", "write_output"]

RECORD = "\x1e"  # ASCII record separator
CONTINUED = "\x1f"  # ASCII unit separator
MAX_LINE = 65536
_OUTPUT_LOCK = threading.Lock()  # one writer at a time: log handler, forwarder, embedded-server thread


def write_output(text: str) -> int:
    """Write to the current ``sys.stderr`` (the live view's proxy while it runs), serialized."""
    with _OUTPUT_LOCK:
        written = sys.stderr.write(text)
        sys.stderr.flush()
    return written


def mark_record(text: str) -> str:
    """Frame one formatted record for :class:`ChildOutput`."""
    return RECORD + text.replace("\n", "\n" + CONTINUED)


class LogStream:
    """A text stream whose lines become log records (installed as ``sys.stdout`` / ``sys.stderr``)."""

    def __init__(self, logger: logging.Logger, level: int, fallback: object) -> None:
        self.logger = logger
        self.level = level
        self.fallback = fallback  # the real stream: used if logging itself writes here
        self._local = threading.local()

    def write(self, text: str) -> int:
        local = self._local
        if getattr(local, "busy", False):  # logging reported its own error through us
            return self.fallback.write(text)  # type: ignore[attr-defined, no-any-return]
        local.busy = True
        try:
            buf: str = getattr(local, "buf", "") + text
            *lines, buf = buf.split("\n")
            if len(buf) > MAX_LINE:
                lines.append(buf)
                buf = ""
            local.buf = buf
            for line in lines:
                self.logger.log(self.level, "%s", line.rstrip("\r"))
        finally:
            local.busy = False
        return len(text)

    def flush(self) -> None:
        """Lines are emitted when they end; a flush does not split one."""

    def close_line(self) -> None:
        """Emit this thread's unfinished line, if any (at exit)."""
        if getattr(self._local, "buf", ""):
            self.write("\n")

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return False

    @property
    def buffer(self) -> object:
        """The real stream's bytes buffer (bytes written there are not turned into records)."""
        return self.fallback.buffer  # type: ignore[attr-defined]

    def fileno(self) -> int:
        return self.fallback.fileno()  # type: ignore[attr-defined, no-any-return]

    @property
    def encoding(self) -> str:
        return "utf-8"


def capture_print(fallback_out: object, fallback_err: object) -> tuple[LogStream, LogStream]:
    """Install ``sys.stdout`` / ``sys.stderr`` as :class:`LogStream` s; returns them."""
    out = LogStream(logging.getLogger("conveyor.stdout"), logging.INFO, fallback_out)
    err = LogStream(logging.getLogger("conveyor.stderr"), logging.WARNING, fallback_err)
    sys.stdout, sys.stderr = out, err
    return out, err


class ChildOutput:
    """Supervisor side: turns a child's output pipe into whole, attributed lines (see module docstring)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self._pending = ""

    def feed(self, data: str) -> list[str]:
        """Complete lines (with their ending) ready to print."""
        text = self._pending + data
        *lines, self._pending = text.split("\n")
        if len(self._pending) > MAX_LINE:
            lines.append(self._pending)
            self._pending = ""
        return [self._line(line) for line in lines]

    def close(self) -> list[str]:
        """The unfinished last line, if any."""
        rest, self._pending = self._pending, ""
        return [self._line(rest)] if rest else []

    def _line(self, line: str) -> str:
        if line.startswith((RECORD, CONTINUED)):
            return line[1:] + "\n"
        return f"[{self.tag}] {line}\n"
