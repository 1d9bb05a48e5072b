"""Output for the producer/operator commands: rich tables for people, ``-o json`` for scripts."""

from __future__ import annotations

import base64
import enum
import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from conveyor_sdk.codecs import JSON, normalize_content_type
from conveyor_sdk.types import (
    EnqueueResult,
    QueueInfo,
    TaskActionResult,
    TaskInfo,
    TaskState,
    WorkerSessionInfo,
)

__all__ = [
    "Output",
    "emit",
    "emit_json",
    "emit_queues",
    "emit_results",
    "emit_sessions",
    "emit_task",
    "emit_tasks",
    "iso",
    "result_dicts",
    "stdout_console",
    "table",
    "task_dict",
]


class Output(enum.StrEnum):
    """``-o`` choices."""

    table = "table"
    json = "json"


# Off a terminal Rich would fold every table at 80 columns; pipes and files get full-width rows.
_PIPE_WIDTH = 100_000


def stdout_console() -> Console:
    """A console for stdout: the terminal's width on a TTY, unbounded rows otherwise."""
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else _PIPE_WIDTH)


def iso(value: datetime | None) -> str | None:
    """ISO 8601 with ``Z`` for UTC (None stays None)."""
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def _payload(info: TaskInfo) -> dict[str, Any]:
    if normalize_content_type(info.content_type) == JSON:
        try:
            return {"payload": json.loads(info.payload) if info.payload else None}
        except ValueError:
            pass
    return {"payload_b64": base64.b64encode(info.payload).decode()}


def task_dict(info: TaskInfo) -> dict[str, Any]:
    """JSON-ready view of a TaskInfo (JSON payloads inline, others base64)."""
    return {
        "id": info.id,
        "queue": info.queue,
        "type": info.type,
        "state": info.state.name.lower(),
        "priority": info.priority,
        "retried": info.retried,
        "max_retry": info.max_retry,
        "last_error": info.last_error,
        "enqueued_at": iso(info.enqueued_at),
        "process_at": iso(info.process_at),
        "started_at": iso(info.started_at),
        "completed_at": iso(info.completed_at),
        "content_type": info.content_type,
        **_payload(info),
        "progress": info.progress,
        "progress_message": info.progress_message,
    }


def _queue_dict(q: QueueInfo) -> dict[str, Any]:
    return {"name": q.name, "paused": q.paused, **{s.name.lower(): n for s, n in q.counts.items()}}


def _session_dict(s: WorkerSessionInfo) -> dict[str, Any]:
    return {
        "id": s.id,
        "queues": list(s.queues),
        "concurrency": s.concurrency,
        "sdk_version": s.sdk_version,
        "connected_at": iso(s.connected_at),
    }


def _result_dict(r: EnqueueResult) -> dict[str, Any]:
    return {"ok": True, "task": task_dict(r.task)} if r.ok and r.task else {"ok": False, "error": r.error}


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A left-titled table; the first column (ids) never wraps, others fold."""
    out = Table(title=title, title_justify="left")
    for index, col in enumerate(columns):  # keep ids whole; let other columns fold instead of "…"
        out.add_column(col, no_wrap=index == 0, overflow="fold")
    for row in rows:
        out.add_row(*(escape("" if v is None else str(v)) for v in row))
    return out


def _task_row(t: TaskInfo) -> tuple[Any, ...]:
    retried = f"{t.retried}/{t.max_retry}"
    return (
        t.id,
        t.queue,
        t.type,
        t.state.name.lower(),
        t.priority,
        retried,
        iso(t.enqueued_at),
        t.last_error.partition("\n")[0],  # a table row shows the summary; `tasks get` shows the traceback
    )


def _task_rows(tasks: Sequence[TaskInfo]) -> Table:
    columns = ("id", "queue", "type", "state", "prio", "retried", "enqueued", "last error")
    return table("tasks", columns, (_task_row(t) for t in tasks))


def _task_detail(info: TaskInfo) -> Table:
    rows = ((k, json.dumps(v) if isinstance(v, dict | list) else v) for k, v in task_dict(info).items())
    return table("task", ("field", "value"), rows)


def _queues(data: Sequence[QueueInfo]) -> tuple[Table, Any]:
    counts = [s for s in TaskState if s not in (TaskState.UNSPECIFIED, TaskState.CANCELED)]
    rows = ((q.name, "yes" if q.paused else "", *(q.counts.get(s, 0) for s in counts)) for q in data)
    columns = ("queue", "paused", *(s.name.lower() for s in counts))
    return table("queues", columns, rows), [_queue_dict(q) for q in data]


def _sessions(data: Sequence[WorkerSessionInfo]) -> tuple[Table, Any]:
    rows = ((s.id, ",".join(s.queues), s.concurrency, s.sdk_version, iso(s.connected_at)) for s in data)
    columns = ("session", "queues", "concurrency", "sdk", "connected")
    return table("sessions", columns, rows), [_session_dict(s) for s in data]


def _results(data: Sequence[TaskActionResult]) -> tuple[Table, Any]:
    rows = ((r.id, r.error or "ok") for r in data)
    return table("results", ("id", "result"), rows), [{"id": r.id, "error": r.error} for r in data]


def emit(rendered: Table, plain: Any, output: Output) -> None:
    """``plain`` as JSON for ``-o json``, else the rich ``rendered`` table."""
    if output is Output.json:
        emit_json(plain)
    else:
        stdout_console().print(rendered)


def emit_task(info: TaskInfo, output: Output) -> None:
    """One task: a field/value table or a JSON object."""
    emit(_task_detail(info), task_dict(info), output)


def emit_tasks(tasks: Sequence[TaskInfo], output: Output) -> None:
    """Task rows or a JSON array."""
    emit(_task_rows(tasks), [task_dict(t) for t in tasks], output)


def emit_queues(data: Sequence[QueueInfo], output: Output) -> None:
    """Queue rows with per-state counts."""
    emit(*_queues(data), output)


def emit_sessions(data: Sequence[WorkerSessionInfo], output: Output) -> None:
    """Worker-session rows."""
    emit(*_sessions(data), output)


def emit_results(data: Sequence[TaskActionResult], output: Output) -> None:
    """Per-id action results."""
    emit(*_results(data), output)


def emit_json(obj: Any) -> None:
    """Print plain JSON (scripts): no colour, no wrapping."""
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def result_dicts(results: Sequence[EnqueueResult]) -> list[dict[str, Any]]:
    """JSON-ready EnqueueBatch results."""
    return [_result_dict(r) for r in results]
