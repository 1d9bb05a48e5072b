"""Reconnect policy and fatal/transient classification of a session's end (protocol §4, §5.9).

With several server addresses (a cluster's nodes) the worker moves to the next address at
once when a session ends or a connect fails, and §5.9's backoff is drawn only after a full
round of addresses failed: one dead node costs no waiting while another node is up. The drawn
delay counts from the start of the round that failed: a round whose set-ups took their time
(conveyord answers ``internal: session setup failed`` after up to a few seconds while its
cluster notices a dead node) has already waited that long, and only the rest is slept.

A round in which a node was reached but failed the session's set-up (no Welcome: conveyord's
``internal: session setup failed`` or our Welcome timeout, while the cluster re-homes a killed
node's sessions) is *free*: the next round starts at once and the backoff does not grow, for at
most ``SETUP_FREE_ROUNDS`` rounds since the last Welcome. Such a round already took the server's
set-up time, so it is no hot loop; past the bound the §5.9 backoff applies as before.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from conveyor_sdk.errors import Code, ConveyorError, InvalidArgument

__all__ = ["SETUP_FREE_ROUNDS", "Backoff", "SettingError", "is_fatal", "parse_addresses"]

SETUP_FREE_ROUNDS = 4  # conveyord fails set-ups for ~13 s after a kill; its rounds take 2-7 s

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


class SettingError(InvalidArgument, ValueError):
    """A connection setting that cannot be used: a bad server address list or reconnect delay."""

    def __str__(self) -> str:
        return self.message


def parse_addresses(value: str | Sequence[str], *, what: str = "server address") -> tuple[str, ...]:
    """One or more server URLs: a comma-separated string or a sequence of strings.

    Every entry must start with ``http://`` or ``https://``; a trailing ``/`` is dropped.
    Raises :class:`SettingError` (an ``InvalidArgument`` and a ``ValueError``) naming the entry.
    """
    if isinstance(value, str):
        entries = [part.strip() for part in value.split(",")]
    elif isinstance(value, Sequence):
        entries = list(value)
    else:
        raise SettingError(f"{what} must be a URL string or a list of them, got {type(value).__name__}")
    if not entries or entries == [""]:
        raise SettingError(f"{what} is empty: give http://host:port or a comma-separated list")
    out: list[str] = []
    for i, raw in enumerate(entries, 1):
        if not isinstance(raw, str):
            raise SettingError(f"{what} #{i} must be a string, got {type(raw).__name__}")
        entry = raw.strip()
        if not entry:
            raise SettingError(f"{what} #{i} of {value!r} is empty")
        if not entry.startswith(("http://", "https://")) or entry in ("http://", "https://"):
            raise SettingError(f"{what} must start with http:// or https://, got {entry!r}")
        out.append(entry.rstrip("/"))
    return tuple(out)


def _check_delays(base: float, cap: float) -> None:
    for name, v in (("reconnect base", base), ("reconnect max", cap)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or v == float("inf"):
            raise SettingError(f"{name} must be a positive number of seconds, got {v!r}")
    if cap < base:
        raise SettingError(f"reconnect max ({cap:g}s) must not be below reconnect base ({base:g}s)")


class Backoff:
    """Full-jitter exponential backoff: delay(n) = uniform[0, min(cap, base * 2**n)), per round.

    ``addresses`` are the servers to rotate through (:attr:`address` is the one to connect to
    next). Each :meth:`next_delay` moves to the next address; it returns 0 until a full round
    of addresses has failed, then the jittered delay for ``rounds`` completed rounds. With one
    address every attempt is a round: plain §5.9. ``failures`` counts failed attempts since
    the last established session; :meth:`reset` (called when a Welcome arrives) puts the
    counters back to 0 and keeps the address that answered. :meth:`began` marks a connect
    attempt (the first of a round starts the round's clock): the delay is then due from the
    round's start, not from its last failure. The RNG is injected.
    """

    def __init__(
        self,
        *,
        base: float = 0.5,
        cap: float = 30.0,
        rng: Callable[[], float] | None = None,
        addresses: Sequence[str] = ("",),
    ) -> None:
        _check_delays(base, cap)
        if not addresses:
            raise SettingError("at least one server address is needed")
        self.base = base
        self.cap = cap
        self._rng = rng or random.Random().random
        self.addresses = tuple(addresses)
        self.index = 0  # the address to connect to next
        self.failures = 0
        self.rounds = 0  # full rounds of addresses failed since the last Welcome
        self._tried = 0  # addresses tried in the current round
        self._round_began: float | None = None  # when the current round's first attempt began
        self._setup_failed = False  # a node of the current round was reached but did not welcome
        self.free_rounds = 0  # rounds let through without a delay since the last Welcome

    @property
    def address(self) -> str:
        """The address the next connect goes to."""
        return self.addresses[self.index]

    def ceiling(self, attempt: int) -> float:
        """Upper bound (exclusive) of the delay before 0-based attempt ``attempt``."""
        return float(min(self.cap, self.base * 2.0 ** min(attempt, 64)))

    def began(self, now: float) -> None:
        """A connect attempt begins at ``now``; the first of a round starts that round's clock."""
        if self._tried == 0:
            self._round_began = now

    def next_delay(self, now: float | None = None, *, setup_failed: bool = False) -> float:
        """Delay before the next attempt (0 within a round); moves to the next address.

        After a full round: the jittered delay, less the time since the round began (when
        ``now`` and :meth:`began` tell it), never below 0; 0 for a round with a set-up failure
        (``setup_failed``: the node was reached, no Welcome came), up to ``SETUP_FREE_ROUNDS``.
        """
        self.failures += 1
        self.index = (self.index + 1) % len(self.addresses)
        self._tried += 1
        self._setup_failed = self._setup_failed or setup_failed
        if self._tried < len(self.addresses):
            return 0.0
        self._tried = 0
        free = self._setup_failed and len(self.addresses) > 1 and self.free_rounds < SETUP_FREE_ROUNDS
        self._setup_failed = False
        if free:
            self.free_rounds += 1
            self._round_began = None
            return 0.0
        delay = self._rng() * self.ceiling(self.rounds)
        self.rounds += 1
        if now is not None and self._round_began is not None:
            delay = max(0.0, delay - (now - self._round_began))
        self._round_began = None
        return delay

    def point_at(self, index: int) -> None:
        """Connect to ``addresses[index]`` next: between rounds only (after :meth:`next_delay`
        returned a round's delay), so the round that follows starts there. The worker's heal
        probe uses it for the address that accepts connections again."""
        self.index = index % len(self.addresses)

    def reset(self) -> None:
        self.failures = self.rounds = self._tried = self.free_rounds = 0
        self._round_began = None
        self._setup_failed = False

    def __repr__(self) -> str:
        return (
            f"<Backoff base={self.base} cap={self.cap} failures={self.failures} rounds={self.rounds}"
            f" address={self.index + 1}/{len(self.addresses)}>"
        )
