"""Output for cron, limits, groups, info and events: rich tables for people, stable JSON for scripts.

JSON shapes are part of the CLI's contract: keys are only ever added. Durations are seconds
(floats), instants ISO 8601 with ``Z``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.markup import escape

from conveyor_cli._client_render import Output, emit, iso, table
from conveyor_sdk.client import (
    ConcurrencyLimit,
    CronEntry,
    GroupConfig,
    RateLimit,
    TaskEvent,
)
from conveyor_sdk.codecs import JSON, normalize_content_type

__all__ = [
    "concurrency_dict",
    "cron_dict",
    "emit_concurrency",
    "emit_cron",
    "emit_cron_list",
    "emit_groups",
    "emit_rates",
    "event_dict",
    "event_line",
    "group_dict",
    "rate_dict",
    "relative",
]


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _human(value: timedelta | None) -> str:
    if value is None:
        return ""
    total = value.total_seconds()
    for unit, size in (("h", 3600), ("m", 60)):
        if total >= size and total % size == 0:
            return f"{int(total // size)}{unit}"
    return f"{total:g}s"


def relative(when: datetime | None, now: datetime | None = None) -> str:
    """``in 4s`` / ``3m ago`` / ``not armed yet`` for a table cell."""
    if when is None:
        return "not armed yet (the server arms new entries on its next scheduler tick)"
    delta = (when - (now or datetime.now(UTC))).total_seconds()
    span = abs(delta)
    text = f"{span:.0f}s" if span < 120 else f"{span / 60:.0f}m" if span < 7200 else f"{span / 3600:.1f}h"
    return f"{iso(when)} (in {text})" if delta >= 0 else f"{iso(when)} ({text} ago)"


def _payload(entry: CronEntry) -> dict[str, Any]:
    if not entry.payload:
        return {"payload": None}
    if normalize_content_type(entry.content_type) == JSON:
        try:
            return {"payload": json.loads(entry.payload)}
        except ValueError:
            pass
    return {"payload_b64": base64.b64encode(entry.payload).decode()}


def cron_dict(entry: CronEntry) -> dict[str, Any]:
    """JSON-ready cron entry."""
    policy = entry.retry_policy
    return {
        "id": entry.id,
        "spec": entry.spec,
        "type": entry.type,
        "queue": entry.queue,
        "paused": entry.paused,
        "next_run_at": iso(entry.next_run_at),
        "content_type": entry.content_type,
        **_payload(entry),
        "priority": entry.priority,
        "max_retry": entry.max_retry,
        "timeout": _seconds(entry.timeout),
        "retention": _seconds(entry.retention),
        "deadline": iso(entry.deadline),
        "expires_at": iso(entry.expires_at),
        "group": entry.group,
        "concurrency_key": entry.concurrency_key,
        "retry_policy": None
        if policy is None
        else {"strategy": policy.strategy.name.lower(), "base": policy.base, "max": policy.max},
        "depends_on": list(entry.depends_on),
    }


def _cron_row(e: CronEntry) -> tuple[Any, ...]:
    state = "paused" if e.paused else "active"
    return (e.id, e.spec, e.type, e.queue, state, "" if e.paused else relative(e.next_run_at))


def emit_cron_list(entries: Sequence[CronEntry], output: Output) -> None:
    """Cron rows with the next fire time."""
    columns = ("id", "spec", "type", "queue", "state", "next run")
    emit(table("cron", columns, (_cron_row(e) for e in entries)), [cron_dict(e) for e in entries], output)


def emit_cron(entry: CronEntry, output: Output) -> None:
    """One cron entry as field/value rows."""
    plain = cron_dict(entry)
    shown = {**plain, "next_run_at": "" if entry.paused else relative(entry.next_run_at)}
    rows = ((k, json.dumps(v) if isinstance(v, dict | list) else v) for k, v in shown.items())
    emit(table("cron entry", ("field", "value"), rows), plain, output)


def rate_dict(r: RateLimit) -> dict[str, Any]:
    """JSON-ready rate limit."""
    return {"queue": r.queue, "rate_per_sec": r.rate_per_sec, "burst": r.burst}


def emit_rates(data: Sequence[RateLimit], output: Output) -> None:
    """Rate-limit rows."""
    rows = ((r.queue, f"{r.rate_per_sec:g}/s", r.burst) for r in data)
    emit(table("rate limits", ("queue", "rate", "burst"), rows), [rate_dict(r) for r in data], output)


def concurrency_dict(c: ConcurrencyLimit) -> dict[str, Any]:
    """JSON-ready concurrency limit."""
    return {"queue": c.queue, "max_active": c.max_active}


def emit_concurrency(data: Sequence[ConcurrencyLimit], output: Output) -> None:
    """Concurrency-limit rows."""
    rows = ((c.queue, c.max_active) for c in data)
    plain = [concurrency_dict(c) for c in data]
    emit(table("concurrency limits", ("queue", "max active per key"), rows), plain, output)


def group_dict(g: GroupConfig) -> dict[str, Any]:
    """JSON-ready group config (durations in seconds)."""
    return {
        "queue": g.queue,
        "group": g.group,
        "max_size": g.max_size,
        "max_delay": _seconds(g.max_delay),
        "grace_period": _seconds(g.grace_period),
    }


def emit_groups(data: Sequence[GroupConfig], output: Output) -> None:
    """Group-config rows (an empty group is the queue-wide default)."""
    rows = (
        (g.queue, g.group or "(queue default)", g.max_size, _human(g.max_delay), _human(g.grace_period))
        for g in data
    )
    columns = ("queue", "group", "max size", "max delay", "grace period")
    emit(table("group configs", columns, rows), [group_dict(g) for g in data], output)


def event_dict(e: TaskEvent) -> dict[str, Any]:
    """JSON-ready lifecycle event (one JSON line per event)."""
    return {
        "occurred_at": iso(e.occurred_at),
        "event": e.event_type.name.lower(),
        "id": e.id,
        "queue": e.queue,
        "type": e.type,
        "state": e.state.name.lower(),
        "attempt": e.attempt,
        "last_error": e.last_error,
    }


def event_line(e: TaskEvent, *, markup: bool) -> str:
    """One aligned text line per event (rich markup escaped when ``markup``)."""
    d = event_dict(e)
    cells = [d["occurred_at"] or "-", f"{d['event']:<9}", d["queue"], d["type"], d["id"], d["state"]]
    cells.append(f"attempt={d['attempt']}")
    if d["last_error"]:
        cells.append(f"error={d['last_error'].partition(chr(10))[0]!r}")  # one line per event
    text = "  ".join(str(c) for c in cells)
    return escape(text) if markup else text
