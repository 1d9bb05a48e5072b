"""Client-assigned task ids: ULIDs (protocol §6.1 ``task_id``), so that a retried Enqueue is idempotent.

48 bits of millisecond time then 80 random bits, as 26 Crockford base32 characters. Ids from
one process are not ordered within a millisecond (ordering is not what they are for: a
server orders tasks by its own clock); 80 random bits make a collision negligible.
"""

from __future__ import annotations

import os
import time

__all__ = ["new_task_id"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> two characters
_SHIFTS = range(120, -10, -10)  # 130 bits (two leading zero bits) as 13 ten-bit groups


def new_task_id() -> str:
    """A fresh ULID for an Enqueue that was given no ``task_id``."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])
