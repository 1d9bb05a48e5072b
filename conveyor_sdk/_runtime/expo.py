"""Prometheus text exposition (0.0.4) helpers: label sets and numbers."""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["escape", "labels_text", "number"]


def escape(value: str) -> str:
    """A label value with backslash, newline and double quote escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels_text(pairs: Iterable[tuple[str, str]]) -> str:
    """``{a="x",b="y"}``, or nothing for no labels."""
    inner = ",".join(f'{k}="{escape(v)}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


def number(value: float) -> str:
    """A sample value or bound: integers without a fraction, ``+Inf`` / ``-Inf`` / ``NaN`` spelled out."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)
