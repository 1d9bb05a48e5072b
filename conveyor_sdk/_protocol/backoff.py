"""Reconnect policy and fatal/transient classification of a session's end (protocol §4, §5.9)."""

from __future__ import annotations

import random
from collections.abc import Callable

from conveyor_sdk.errors import Code, ConveyorError

__all__ = ["Backoff", "is_fatal"]

_FATAL = frozenset({Code.UNAUTHENTICATED, Code.PERMISSION_DENIED, Code.INVALID_ARGUMENT})


def is_fatal(error: ConveyorError | None) -> bool:
    """True when reconnecting cannot help.

    unauthenticated / permission_denied, and invalid_argument (the server rejected our
    protocol, e.g. the Hello) are fatal. A violation *by the server* that we detected
    locally (``details["peer_violation"]``) is transient, like any other error and like
    a clean end (``None``).
    """
    if error is None:
        return False
    if error.details.get("peer_violation"):
        return False
    return error.code in _FATAL


class Backoff:
    """Full-jitter exponential backoff: delay(n) = uniform[0, min(cap, base * 2**n)).

    ``failures`` counts attempts since the last established session; :meth:`reset`
    (called when a Welcome arrives) puts it back to 0. The RNG is injected.
    """

    def __init__(
        self,
        *,
        base: float = 0.5,
        cap: float = 30.0,
        rng: Callable[[], float] | None = None,
    ) -> None:
        self.base = base
        self.cap = cap
        self._rng = rng or random.Random().random
        self.failures = 0

    def ceiling(self, attempt: int) -> float:
        """Upper bound (exclusive) of the delay before 0-based attempt ``attempt``."""
        return float(min(self.cap, self.base * 2.0 ** min(attempt, 64)))

    def next_delay(self) -> float:
        """Delay before the next attempt; advances the failure counter."""
        delay = self._rng() * self.ceiling(self.failures)
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0

    def __repr__(self) -> str:
        return f"<Backoff base={self.base} cap={self.cap} failures={self.failures}>"
