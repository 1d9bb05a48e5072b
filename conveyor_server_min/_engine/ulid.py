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


def encode_ulid(value: int) -> str:
    """Encode a 128-bit integer as 26 Crockford base32 characters."""
    # 130 bits (two leading zero bits) as 13 ten-bit groups; written out, not a comprehension,
    # which would cost a frame and a loop for every id.
    p, v = _PAIRS, value
    return "".join(
        (p[v >> 120 & 1023], p[v >> 110 & 1023], p[v >> 100 & 1023], p[v >> 90 & 1023], p[v >> 80 & 1023],
         p[v >> 70 & 1023], p[v >> 60 & 1023], p[v >> 50 & 1023], p[v >> 40 & 1023], p[v >> 30 & 1023],
         p[v >> 20 & 1023], p[v >> 10 & 1023], p[v & 1023])
    )  # fmt: skip


_POOL_BYTES = 10 * 256  # the random parts of this many ids, fetched in one system call
_forks = 0  # processes forked from this one so far, as this one counts them (see _forked)


def _forked() -> None:
    global _forks  # noqa: PLW0603  # the only state a fork hook can reach
    _forks += 1


os.register_at_fork(after_in_child=_forked)  # a child must not reuse its parent's unread entropy


class UlidGenerator:
    """Strictly increasing ULIDs from ``clock``; ``entropy(n)`` supplies random bytes.

    Random bytes are fetched for many ids at once (one ``getrandom`` system call per 256 ids,
    not one per id) and dropped in a forked child.
    """

    def __init__(self, clock: Clock, entropy: Callable[[int], bytes] = os.urandom) -> None:
        self._clock = clock
        self._entropy = entropy
        self._last = 0
        self._pool = b""
        self._used = 0
        self._forks = _forks

    def new(self, now: int | None = None) -> str:
        """The next id; ``now`` (epoch nanoseconds): the caller's reading of the same clock."""
        millis = max(0, (self._clock.now() if now is None else now) // 1_000_000) & ((1 << 48) - 1)
        used = self._used
        if used >= len(self._pool) or self._forks != _forks:
            self._pool, used, self._forks = self._entropy(_POOL_BYTES), 0, _forks
        self._used = used + 10
        candidate = (millis << _RANDOM_BITS) | int.from_bytes(self._pool[used : used + 10], "big")
        if candidate <= self._last:
            candidate = self._last + 1
        self._last = candidate
        return encode_ulid(candidate)
