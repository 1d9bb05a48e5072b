"""Client-assigned task ids: ULIDs (protocol §6.1 ``task_id``), so that a retried Enqueue is idempotent.

48 bits of millisecond time then 80 random bits, as 26 Crockford base32 characters. Ids from one
process strictly increase: within a millisecond (or when the clock steps back) the previous value
is incremented, as the reference server's own generator does. So the tasks of one producer sort
in the order it enqueued them (a listing by id, newest first, shows them as they were sent), and
two threads of one process can never draw the same id (an id seen twice is read as a repeat).
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["new_task_id"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> two characters
_SHIFTS = range(120, -10, -10)  # 130 bits (two leading zero bits) as 13 ten-bit groups


class _Floor:
    """The last id drawn in this process, behind a lock (SyncClient calls come from any thread)."""

    __slots__ = ("last", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last = 0


_floor = _Floor()


def new_task_id() -> str:
    """A fresh ULID for an Enqueue that was given no ``task_id``, above every earlier one here."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    floor = _floor
    with floor.lock:
        if value <= floor.last:
            value = floor.last + 1
        floor.last = value
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])
