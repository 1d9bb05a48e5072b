"""The one quota rule that shares a session's slots among its queues (pure: no I/O, no clock).

The session machine (``session.py``) asks it before every start, so the in-process Worker and
the multi-process runtime (one machine per pool, concurrency = the pool's capacity) follow the
same rule; the runtime's executor only answers whether a child has a free slot.

Rules:

* Each queue has a *quota*: its weight's part of the session's ``concurrency`` slots, exactly
  (``a=3, b=1`` on 4 slots: 3 and 1; on 2 slots: 1.5 and 0.5), so no queue's share rounds
  down to nothing when there are fewer slots than queues.
* Among the queues the quota admits (below it, or allowed to borrow), turns follow the weights
  in *starts*: each start of a queue moves its virtual start time on by ``1 / weight``, and the
  queue due first goes next (a queue back from idle starts at the current virtual time, so it
  brings no credit with it). ``a=3, b=1`` on one slot thus alternates a, b, a, a, a, b, ...
* A queue at or above its quota may *borrow* a free slot only if enough free slots remain for
  every other queue that is below its quota and *owed* (its deficit, rounded up): it has a
  parked delivery, or a delivery of it is *expected*. Nothing is pre-empted: a borrowed slot is
  held until its job ends.
* Expected means: within ``hold`` seconds after the Welcome (every declared queue), or within
  ``hold`` seconds after one of the queue's jobs ended *while the server over-delivers* (running
  + parked > concurrency). Upstream grants ``concurrency`` credits per queue, so the finished
  job's credit brings that queue's next task about a round trip later; lending the slot to a
  queue that merely has more parked would hand the weight to whoever refills fastest (``a=3,
  b=1`` measured 0.62 instead of 0.75 against conveyord). A server that grants ``concurrency`` in
  total (the protocol document, the reference server) never over-delivers, so after the Welcome
  window the rule is work-conserving there and that server's dispatcher decides which queue fills
  a freed credit. A queue without backlog costs at most ``hold`` of idle slot per ended job.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

__all__ = ["DEFAULT_HOLD", "Quota", "apportion"]

DEFAULT_HOLD = 0.1  # s: covers a refill round trip on a LAN; longer costs idle slots at a backlog's end


def apportion(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """Split ``total`` into integer shares proportional to ``weights`` (largest remainder)."""
    weight_sum = sum(weights.values())
    if total <= 0 or weight_sum <= 0:
        return dict.fromkeys(weights, 0)
    exact = {k: total * w / weight_sum for k, w in weights.items()}
    shares = {k: int(v) for k, v in exact.items()}
    left = total - sum(shares.values())
    for key in sorted(exact, key=lambda k: (shares[k] - exact[k], k))[:left]:
        shares[key] += 1
    return shares


class Quota:
    """Per-queue slot accounting of one session (see the module docstring)."""

    __slots__ = (
        "_expect", "_opened_until", "_order", "_tag", "_total", "_vtime",
        "hold", "running", "slots", "weights",
    )  # fmt: skip

    def __init__(self, weights: Mapping[str, int], slots: int, *, hold: float = DEFAULT_HOLD) -> None:
        self.weights = dict(weights)
        self.slots = slots
        self.hold = hold
        self._total = sum(self.weights.values())
        self.running: dict[str, int] = dict.fromkeys(self.weights, 0)
        self._order = {q: i for i, q in enumerate(self.weights)}  # ties: first declared
        self._tag: dict[str, float] = dict.fromkeys(self.weights, 0.0)  # virtual time of next start
        self._vtime = 0.0
        self._expect: dict[str, float] = {}  # queue -> until when a delivery of it is expected
        self._opened_until = 0.0

    def add(self, queue: str) -> None:
        """Serve a queue the Hello did not declare, with weight 1 (quotas are recomputed)."""
        if queue in self.weights:
            return
        self.weights[queue] = 1
        self.running[queue] = 0
        self._order[queue] = len(self._order)
        self._tag[queue] = self._vtime
        self._total += 1

    def quota(self, queue: str) -> float:
        """The queue's share of the slots (0 for a queue not served)."""
        return self.slots * self.weights.get(queue, 0) / self._total

    def below(self, queue: str) -> bool:
        """Whether ``queue`` runs fewer jobs than its quota (it may always take a free slot)."""
        weight = self.weights.get(queue)  # integer arithmetic: running / slots < weight / total
        return weight is not None and self.running[queue] * self._total < self.slots * weight

    def deficit(self, queue: str) -> int:
        """Slots ``queue`` lacks to reach its quota, rounded up (0 at or above it)."""
        short = self.slots * self.weights[queue] - self.running[queue] * self._total
        return -(-short // self._total) if short > 0 else 0

    # -- events ------------------------------------------------------------------------------
    def opened(self, now: float) -> None:
        """A Welcome arrived: every declared queue's first deliveries are on their way."""
        self._opened_until = until = now + self.hold
        self._expect = dict.fromkeys(self.weights, until)

    def started(self, queue: str) -> None:
        self.running[queue] += 1
        self._tag[queue] = max(self._tag[queue], self._vtime) + 1 / self.weights[queue]

    def ended(self, queue: str, now: float) -> None:
        """A job of ``queue`` ended: its credit may bring the queue's next task (see ``owed``)."""
        self.running[queue] -= 1
        self._expect[queue] = now + self.hold

    def prune(self, now: float) -> None:
        """Forget expectations that lapsed (the queue had no backlog)."""
        for queue in [q for q, until in self._expect.items() if until <= now]:
            del self._expect[queue]

    def next_lapse(self) -> float | None:
        """When a slot held back for an expected queue may be lent (call ``prune`` then)."""
        return min(self._expect.values()) if self._expect else None

    # -- decisions ---------------------------------------------------------------------------
    def owed(self, queue: str, waiting: Collection[str], now: float, over: bool) -> int:
        """Free slots other queues are owed: their deficit below quota, if they wait or are expected.

        ``waiting``: queues with parked deliveries; ``over``: the server over-delivers now.
        """
        expecting = over or now < self._opened_until
        total = 0
        for q in self.weights:
            if q == queue:
                continue
            if q in waiting or (expecting and now < self._expect.get(q, 0.0)):
                total += self.deficit(q)
        return total

    def admits(self, queue: str, free: int, waiting: Collection[str], now: float, over: bool) -> bool:
        """May a delivery of ``queue`` take one of ``free`` slots?"""
        if free <= 0:
            return False
        return self.below(queue) or free - self.owed(queue, waiting, now, over) >= 1

    def choose(
        self, ready: Sequence[str], waiting: Collection[str], free: int, now: float, over: bool
    ) -> str | None:
        """Which of the ``ready`` queues (their next delivery can start) gets a free slot, or None.

        The turn is the queue (admitted and ready, or expected) whose next start is due first in
        virtual time; when it is an expected queue's, the slot waits (at most ``hold``).
        """
        allowed = [q for q in ready if self.admits(q, free, waiting, now, over)]
        if not allowed:
            return None
        active = allowed
        if over or now < self._opened_until:
            # An expected queue takes part in the turn even when this slot is not its own: a
            # queue whose slot turns over faster must not outrun the weights in starts.
            active = allowed + [q for q, until in self._expect.items() if now < until and q not in ready]
        tags, order = self._tag, self._order
        self._vtime = vtime = max(self._vtime, min(tags[q] for q in active))
        turn = min(active, key=lambda q: (max(tags[q], vtime), order[q]))
        return turn if turn in allowed else None  # else its delivery is on its way (module docstring)
