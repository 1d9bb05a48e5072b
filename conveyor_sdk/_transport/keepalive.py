"""When to PING a connection and when to give it up (sans-I/O: the caller passes the time).

A dead link (a dead NAT entry, a partitioned node, a frozen peer) delivers no bytes and
reports no error: the sockets stay open and TCP retransmits for about 15 minutes before the
kernel gives up, and a connection with nothing to send is never noticed at all. So every
connection this SDK keeps open checks itself:

* **PING.** A PING goes out ``interval`` seconds after the last one was answered (the first
  one ``interval`` after the connection opened), whether or not other frames arrived
  meanwhile: only the answer to a PING of ours proves that our writes reach the peer and its
  answers reach us. A link that loses only our direction, while the server goes on sending,
  is noticed too, and nothing is counted per read or per message (no cost on the task path).
  A PING unanswered ``timeout`` seconds after it was sent ends the connection.
* **Writes that cannot drain.** Bytes waiting to be written (held back by the peer's
  flow-control window or by a full socket) that make no progress for ``timeout`` seconds end
  the connection too: the peer, or the link, no longer takes what we send.

The defaults, ``interval`` 5 s and ``timeout`` 10 s, notice a dead link 10 to 15 s after its
last answered PING: inside the 10-20 s a worker should take, well before a default lease
(60 s) lapses, and much sooner than TCP's retransmission timeout. 10 s is generous for an
answer the server's HTTP/2 layer gives without any application work: it rides out a loaded
server, a garbage-collection pause or three lost TCP segments (retransmitted after 1, 2 and
4 s) without a false alarm. A PING every 5 s costs 17 bytes each way. For comparison: gRPC's
keepalive waits 20 s for the answer; Temporal's SDKs PING every 30 s with a 15 s timeout;
the Go SDK relies on TCP keepalive (15 s idle, 15 s interval, 9 probes: about 2.5 minutes).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_INTERVAL",
    "DEFAULT_TIMEOUT",
    "Keepalive",
    "KeepaliveOptions",
    "LinkDead",
    "PingNow",
]

DEFAULT_INTERVAL = 5.0
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class KeepaliveOptions:
    """PING period and the time a PING or a pending write may take (seconds, both > 0)."""

    interval: float = DEFAULT_INTERVAL
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        for name in ("interval", "timeout"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"keepalive {name} must be a positive number of seconds, got {value!r}")


@dataclass(frozen=True, slots=True)
class PingNow:
    """Send a PING carrying ``payload`` (8 bytes)."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class LinkDead:
    """Give the connection up: ``reason`` says why (for the error and the log)."""

    reason: str


class Keepalive:
    """The keepalive rules of one connection (see the module docstring).

    Call :meth:`poll` at :meth:`next_deadline` (earlier is harmless) with the progress of what
    waits to be written; call :meth:`acked` with each PING acknowledgement (then
    :meth:`next_deadline` may have moved).
    """

    __slots__ = (
        "_progress",
        "_progress_at",
        "interval",
        "last_ack",
        "outstanding",
        "pings",
        "rtt",
        "sent_at",
        "timeout",
    )

    def __init__(self, options: KeepaliveOptions, now: float) -> None:
        self.interval = options.interval
        self.timeout = options.timeout
        self.last_ack = now  # the last answered PING (or the connection's start)
        self.outstanding: bytes | None = None  # the payload of the PING awaiting its answer
        self.sent_at = 0.0
        self.pings = 0  # PINGs sent so far
        self.rtt: float | None = None  # of the last answered PING
        self._progress: Hashable | None = None  # the caller's write progress at the last poll
        self._progress_at = now  # when it last moved

    def __repr__(self) -> str:
        state = "awaiting answer" if self.outstanding is not None else "idle"
        return f"<Keepalive every {self.interval:g}s, timeout {self.timeout:g}s, {state}, pings={self.pings}>"

    def next_deadline(self) -> float:
        """When :meth:`poll` has something to decide next."""
        waiting = self.outstanding is not None
        due = self.sent_at + self.timeout if waiting else self.last_ack + self.interval
        if self._progress is not None:  # a write is pending: look again when it would have stalled
            due = min(due, self._progress_at + self.timeout)
        return due

    def poll(self, now: float, progress: Hashable | None = None) -> PingNow | LinkDead | None:
        """What to do at ``now``.

        ``progress``: None when nothing waits to be written; otherwise a value that changes
        whenever some of the waiting bytes moved on (e.g. bytes the socket accepted so far).
        """
        if self.outstanding is not None and now >= self.sent_at + self.timeout:
            return LinkDead(f"no answer to an HTTP/2 PING within {self.timeout:g}s")
        if progress is None:
            self._progress = None
        elif progress != self._progress:
            self._progress, self._progress_at = progress, now
        elif now >= self._progress_at + self.timeout:
            return LinkDead(f"a write made no progress for {self.timeout:g}s")
        if self.outstanding is None and now >= self.last_ack + self.interval:
            return self._ping(now)
        return None

    def ping_due_on_reuse(self, now: float) -> PingNow | None:
        """A PING to send with the first request on a connection unused for ``interval`` or more.

        For a pooled connection that sat idle: the PING goes out with the request, in the same
        write, and costs the call no round trip; a dead connection is then known ``timeout``
        after the call began, however long the call's own deadline is.
        """
        if self.outstanding is not None or now < self.last_ack + self.interval:
            return None
        return self._ping(now)

    def _ping(self, now: float) -> PingNow:
        self.pings += 1
        self.outstanding = self.pings.to_bytes(8, "big")
        self.sent_at = now
        return PingNow(self.outstanding)

    def acked(self, payload: bytes, now: float) -> bool:
        """A PING acknowledgement arrived; True when it answers our outstanding PING."""
        if self.outstanding is None or payload != self.outstanding:
            return False  # an answer to nothing of ours (or a stale one): ignored
        self.outstanding = None
        self.rtt = now - self.sent_at
        self.last_ack = now
        return True
