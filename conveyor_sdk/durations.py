"""Parse and format durations the way the CLI and server flags accept them.

Accepted: ``2s``, ``500ms``, ``1m``, ``1h``, ``1m30s``, ``1.5s``, ``250us``, a bare
number (seconds), or a :class:`datetime.timedelta`. Negative values are refused.
"""

from __future__ import annotations

import re
from datetime import timedelta

__all__ = ["format_duration", "parse_duration"]

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(value: str | float | timedelta) -> float:
    """Seconds in ``value``; raises ``ValueError`` with a clear message when malformed."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = _parse_units(text)
    if seconds < 0:
        raise ValueError(f"duration must not be negative, got {value!r}")
    return seconds


def _parse_units(text: str) -> float:
    pos, total = 0, 0.0
    while pos < len(text):
        match = _PART.match(text, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}: use forms like 2s, 500ms, 1m, 1h30m")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not text:
        raise ValueError("invalid duration '': use forms like 2s, 500ms, 1m")
    return total


def format_duration(seconds: float) -> str:
    """Compact human form: ``1.5s``, ``250ms``, ``2m``."""
    if seconds and seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
