"""Per-queue limits: token-bucket rate limits and per-key concurrency caps, plus group configs."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GroupConfig", "TokenBucket"]


@dataclass(slots=True)
class TokenBucket:
    """``rate`` tokens/s up to ``burst``; starts full. Time is passed in."""

    rate: float
    burst: int
    tokens: float = -1.0
    last: float = 0.0

    def refill(self, now: float) -> None:
        if self.tokens < 0:
            self.tokens, self.last = float(self.burst), now
            return
        if now > self.last:
            self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.rate)
            self.last = now

    def available(self, now: float) -> bool:
        self.refill(now)
        return self.tokens >= 1.0

    def take(self, now: float) -> None:
        self.refill(now)
        self.tokens -= 1.0

    def next_token_at(self) -> float:
        """When the bucket next holds a whole token (call after ``refill``)."""
        missing = max(0.0, 1.0 - self.tokens)
        return self.last + missing / self.rate


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """When a group fires: size, max delay since the first member, grace since the last."""

    max_size: int
    max_delay: float
    grace_period: float
