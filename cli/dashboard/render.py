"""Templates (Jinja2 with autoescaping on every template) and display helpers.

Payloads, errors, queue and type names are untrusted: they only ever reach HTML through
autoescaped ``{{ }}`` expressions. No template uses ``|safe``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import msgspec

__all__ = ["PREVIEW_LIMIT", "ago", "env", "payload_preview"]

HERE = Path(__file__).parent
PREVIEW_LIMIT = 64 * 1024  # bytes of a payload shown; the size is always shown in full


def env() -> jinja2.Environment:
    """The template environment (autoescape for every file, undefined names are errors)."""
    e = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    e.filters["ts"] = timestamp
    e.filters["ago"] = ago
    return e


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
