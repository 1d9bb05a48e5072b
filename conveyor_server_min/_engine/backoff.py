"""Retry backoff: exponential / linear with full jitter, fixed without jitter (plain functions).

Durations are integers in any unit (the engine passes nanoseconds); the result is in the same unit.
"""

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


def backoff_delay(strategy: str, base: int, cap: int, retried: int, rand: Callable[[], float]) -> int:
    """Delay before the next attempt after failure number ``retried`` (0-based).

    exponential: uniform[0, min(base * 2**retried, cap)); linear: uniform[0, min(base * (retried+1), cap));
    fixed: exactly min(base, cap). A non-positive ceiling yields 0. Jitter is truncated to the unit.
    """
    if strategy == FIXED:
        return max(0, min(base, cap))
    if strategy == LINEAR:
        ceiling = min(base * (retried + 1), cap)
    else:
        ceiling = cap if retried >= 64 else min(base * (2**retried), cap)
    if ceiling <= 0:
        return 0
    return int(rand() * ceiling)
