"""Retry backoff: exponential / linear with full jitter, fixed without jitter (plain functions)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["EXPONENTIAL", "FIXED", "LINEAR", "backoff_delay", "strategy_name"]

EXPONENTIAL = "exponential"
LINEAR = "linear"
FIXED = "fixed"
_BY_ENUM = {1: EXPONENTIAL, 2: LINEAR, 3: FIXED}


def strategy_name(enum_value: int, default: str) -> str:
    """Map a RetryStrategy enum number to a name; UNSPECIFIED/unknown -> ``default``."""
    return _BY_ENUM.get(enum_value, default)


def backoff_delay(strategy: str, base: float, cap: float, retried: int, rand: Callable[[], float]) -> float:
    """Delay before the next attempt after failure number ``retried`` (0-based).

    exponential: uniform[0, min(base * 2**retried, cap)); linear: uniform[0, min(base * (retried+1), cap));
    fixed: exactly min(base, cap). A non-positive ceiling yields 0.
    """
    if strategy == FIXED:
        return max(0.0, min(base, cap))
    if strategy == LINEAR:
        ceiling = min(base * (retried + 1), cap)
    else:
        ceiling = cap if retried >= 64 else min(base * (2**retried), cap)
    if ceiling <= 0:
        return 0.0
    return rand() * ceiling
