"""A small monotonic ULID generator (26-char Crockford base32, sorts by creation).

48 bits of millisecond timestamp followed by 80 random bits. Within one
millisecond (or if the clock steps backwards) the previous value is
incremented, so ids from one generator are strictly increasing.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from conveyor_server_min._engine.clock import Clock

__all__ = ["UlidGenerator", "encode_ulid"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS = 80
_RANDOM_MASK = (1 << _RANDOM_BITS) - 1


_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> two characters
_SHIFTS = range(120, -10, -10)  # 130 bits (two leading zero bits) as 13 ten-bit groups


def encode_ulid(value: int) -> str:
    """Encode a 128-bit integer as 26 Crockford base32 characters."""
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])


class UlidGenerator:
    """Strictly increasing ULIDs from ``clock``; ``entropy(n)`` supplies random bytes."""

    def __init__(self, clock: Clock, entropy: Callable[[int], bytes] = os.urandom) -> None:
        self._clock = clock
        self._entropy = entropy
        self._last = 0

    def new(self) -> str:
        millis = max(0, self._clock.now() // 1_000_000) & ((1 << 48) - 1)
        candidate = (millis << _RANDOM_BITS) | int.from_bytes(self._entropy(10), "big")
        if candidate <= self._last:
            candidate = self._last + 1
        self._last = candidate
        return encode_ulid(candidate)
