"""Templates (Jinja2 with autoescaping on every template) and display helpers.

Payloads, errors, queue and type names are untrusted: they only ever reach HTML through
autoescaped ``{{ }}`` expressions. No template uses ``|safe``; the only ``Markup`` handed to a
template is the output of another autoescaped template (:func:`fragment`).
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import msgspec

__all__ = [
    "ERROR_LIMIT",
    "PREVIEW_LIMIT",
    "ago",
    "duration",
    "env",
    "fragment",
    "payload_preview",
    "shared_env",
    "timeline",
]

HERE = Path(__file__).parent
PREVIEW_LIMIT = 64 * 1024  # bytes of a payload shown; the size is always shown in full
ERROR_LIMIT = 64 * 1024  # characters of last_error shown (a traceback); the length is always shown


def env() -> jinja2.Environment:
    """The template environment (autoescape for every file, undefined names are errors).

    ``auto_reload`` is off: the templates ship inside the package and never change under a running
    dashboard, and checking them cost one ``stat`` per template per page (eight on the overview).
    """
    e = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        auto_reload=False,
    )
    e.filters["ts"] = timestamp
    e.filters["ago"] = ago
    e.filters["duration"] = duration
    return e


@functools.cache
def shared_env() -> jinja2.Environment:
    """One environment per process (compiled templates are kept; the environment is never changed)."""
    return env()


def fragment(name: str, **ctx: Any) -> markupsafe.Markup:
    """``name`` rendered now, autoescaped, as Markup that a later page embeds without re-escaping.

    For parts that change far less often than they are shown (the charts): render once, reuse.
    """
    return markupsafe.Markup(shared_env().get_template(name).render(**ctx))  # autoescaped


def timestamp(value: datetime | None) -> str:
    """``2026-11-30 17:02:03 UTC`` or ``—``."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(value: datetime | None, now: datetime | None = None) -> str:
    """A short relative time: ``12s ago`` / ``in 3m``."""
    if value is None:
        return ""
    delta = ((now or datetime.now(UTC)) - value).total_seconds()
    future, secs = delta < 0, abs(int(delta))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            text = f"{secs // size}{unit}"
            break
    else:
        text = f"{secs}s"
    return f"in {text}" if future else f"{text} ago"


def payload_preview(payload: bytes, content_type: str) -> dict[str, Any]:
    """How to show a payload: ``kind`` is json, text or hex; ``text`` is the (escaped later) body."""
    ct = (content_type or "application/json").split(";")[0].strip().lower()
    head, truncated = payload[:PREVIEW_LIMIT], len(payload) > PREVIEW_LIMIT
    out: dict[str, Any] = {"size": len(payload), "content_type": ct, "truncated": truncated}
    if not payload:
        return {**out, "kind": "empty", "text": ""}
    if not truncated and (ct.endswith("json") or ct.endswith("+json")):
        try:
            text = json.dumps(json.loads(payload), indent=2, ensure_ascii=False)
            return {**out, "kind": "json", "text": text}
        except ValueError:
            pass
    if not truncated and "msgpack" in ct:
        try:
            value = msgspec.msgpack.decode(payload)
            text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
            return {**out, "kind": "json", "text": text}
        except (msgspec.DecodeError, TypeError, ValueError):
            pass
    if ct.startswith("text/") or ct.endswith("json") or ct.endswith("xml"):
        try:
            return {**out, "kind": "text", "text": head.decode("utf-8")}
        except UnicodeDecodeError:
            pass
    return {**out, "kind": "hex", "text": hexdump(head)}


def hexdump(data: bytes) -> str:
    """16 bytes a line: offset, hex, printable ASCII."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off : off + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {chunk.hex(' '):<47}  {text}")
    return "\n".join(lines)


def duration(seconds: float | None) -> str:
    """``850 ms``, ``12.3 s``, ``4m 05s``, ``2h 03m`` or ``—``."""
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    secs = int(seconds)
    if secs < 3600:
        return f"{secs // 60}m {secs % 60:02d}s"
    return f"{secs // 3600}h {secs % 3600 // 60:02d}m"


def timeline(task: Any, now: datetime | None = None) -> dict[str, Any]:
    """The task's timestamps in order with the gap before each, wait and run time, bounded error."""
    marks = [
        ("enqueued", task.enqueued_at),
        ("due", task.process_at),
        ("started", task.started_at),
        ("finished", task.completed_at),
    ]
    known = sorted(((t, label) for label, t in marks if t is not None), key=lambda m: m[0])
    steps, prev = [], None
    for at, label in known:
        steps.append({"label": label, "at": at, "gap": (at - prev).total_seconds() if prev else None})
        prev = at
    started, done = task.started_at, task.completed_at
    due = max((t for t in (task.enqueued_at, task.process_at) if t is not None), default=None)
    run = None
    if started is not None:
        end = done or (now or datetime.now(UTC))
        run = max(0.0, (end - started).total_seconds())
    wait = (started - due).total_seconds() if started and due and started >= due else None
    error = task.last_error or ""
    return {
        "timeline": steps,
        "run_time": run,
        "running": started is not None and done is None and task.state.name == "ACTIVE",
        "wait_time": wait,
        "attempt": task.retried + 1,  # the current or last attempt, 1-based
        "error_text": error[:ERROR_LIMIT],
        "error_length": len(error),
    }
