"""Per-queue limits: token-bucket rate limits and per-key concurrency caps, plus group configs.

Instants and durations are integer nanoseconds (:mod:`.clock`); rates are per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from conveyor_server_min._engine.clock import MAX_INSTANT, NANOS, clamp

__all__ = ["GroupConfig", "TokenBucket"]


@dataclass(slots=True)
class TokenBucket:
    """``rate`` tokens/s up to ``burst``; starts full. Time (nanoseconds) is passed in."""

    rate: float
    burst: int
    tokens: float = -1.0
    last: int = 0

    def refill(self, now: int) -> None:
        if self.tokens < 0:
            self.tokens, self.last = float(self.burst), now
            return
        if now > self.last:
            self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.rate / NANOS)
            self.last = now

    def available(self, now: int) -> bool:
        self.refill(now)
        return self.tokens >= 1.0

    def take(self, now: int) -> None:
        self.refill(now)
        self.tokens -= 1.0

    def next_token_at(self) -> int:
        """When the bucket next holds a whole token (call after ``refill``), rounded up to the nanosecond."""
        missing = max(0.0, 1.0 - self.tokens)
        wait = missing * NANOS / self.rate  # a tiny rate gives a huge (even infinite) float
        return clamp(self.last + math.ceil(min(wait, float(MAX_INSTANT))))


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """When a group fires: size, max delay since the first member, grace since the last (nanoseconds)."""

    max_size: int
    max_delay: int
    grace_period: int
