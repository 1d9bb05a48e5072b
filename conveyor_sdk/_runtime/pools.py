"""Pool planning and weighted slot admission (pure functions and plain state; no I/O, no clock).

Rules:

* Every declared queue belongs to exactly one pool. ``--pool NAME:QUEUES:N``
  declares an explicit pool of ``N`` processes serving ``QUEUES`` (comma
  separated); the queues no explicit pool names share the ``default`` pool,
  which gets the processes left over (at least one). Each pool has its own
  session (see ``supervisor.py``), so admission below only ever arbitrates
  between the queues of one pool.
* Inside a pool every queue has a *quota* of slots proportional to its weight
  (largest-remainder apportionment of the pool's slots). A queue below its
  quota may always take a free slot. A queue at or above its quota may borrow a
  free slot only if enough free slots remain for every *other* queue that has
  waiting work and is below its quota. So under contention each queue keeps
  its share, and idle capacity is lent instead of wasted. Nothing is
  pre-empted: a borrowed slot is held until its job ends.
* "Waiting work" is learned from refusals: when a job is refused, its queue is
  marked as having demand (stamped with the caller's ``now``) until the job is
  admitted or the stamp is older than ``demand_ttl``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_POOL",
    "QUEUE_NAME",
    "PoolSpec",
    "SlotBook",
    "apportion",
    "parse_pool",
    "parse_queue",
    "plan_pools",
]

QUEUE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9\-_.]*$")
DEFAULT_POOL = "default"


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """A named group of child processes serving some queues."""

    name: str
    queues: tuple[str, ...]
    processes: int


def parse_queue(text: str) -> tuple[str, int]:
    """``NAME=WEIGHT`` (or ``NAME``, weight 1) -> (name, weight). Raises ValueError."""
    name, sep, weight_text = text.partition("=")
    name = name.strip()
    if not QUEUE_NAME.match(name):
        raise ValueError(f"invalid queue name {name!r} (must match {QUEUE_NAME.pattern})")
    if not sep:
        return name, 1
    try:
        weight = int(weight_text)
    except ValueError:
        raise ValueError(f"invalid weight {weight_text!r} for queue {name!r} (an integer > 0)") from None
    if weight <= 0:
        raise ValueError(f"queue {name!r} weight must be > 0, got {weight}")
    return name, weight


def parse_pool(text: str) -> PoolSpec:
    """``NAME:QUEUE[,QUEUE...]:N`` -> PoolSpec. Raises ValueError."""
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"invalid pool {text!r}: expected NAME:QUEUES:N, e.g. slow:reports,exports:2")
    name, queues_text, count_text = (p.strip() for p in parts)
    if not QUEUE_NAME.match(name):
        raise ValueError(f"invalid pool name {name!r}")
    queues = tuple(q.strip() for q in queues_text.split(",") if q.strip())
    if not queues:
        raise ValueError(f"pool {name!r} names no queue")
    for queue in queues:
        if not QUEUE_NAME.match(queue):
            raise ValueError(f"invalid queue name {queue!r} in pool {name!r}")
    try:
        count = int(count_text)
    except ValueError:
        raise ValueError(f"invalid process count {count_text!r} in pool {name!r}") from None
    if count <= 0:
        raise ValueError(f"pool {name!r} needs at least one process, got {count}")
    return PoolSpec(name, queues, count)


def plan_pools(processes: int, queues: Sequence[str], explicit: Sequence[PoolSpec] = ()) -> list[PoolSpec]:
    """Explicit pools plus a ``default`` pool for every queue they leave out."""
    seen: dict[str, str] = {}
    names = set()
    for pool in explicit:
        if pool.name in names:
            raise ValueError(f"pool {pool.name!r} declared twice")
        names.add(pool.name)
        for queue in pool.queues:
            if queue in seen:
                raise ValueError(f"queue {queue!r} is in both pool {seen[queue]!r} and pool {pool.name!r}")
            seen[queue] = pool.name
    rest = tuple(q for q in queues if q not in seen)
    plan = list(explicit)
    if rest:
        if DEFAULT_POOL in names:
            raise ValueError(f"pool name {DEFAULT_POOL!r} is reserved for queues no --pool names")
        used = sum(p.processes for p in explicit)
        plan.append(PoolSpec(DEFAULT_POOL, rest, max(1, processes - used)))
    return plan


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


class SlotBook:
    """Per-queue slot accounting for one pool."""

    __slots__ = ("_demand", "demand_ttl", "quota", "used")

    def __init__(self, weights: Mapping[str, int], slots: int, *, demand_ttl: float = 30.0) -> None:
        self.quota = apportion(slots, weights)
        self.used: dict[str, int] = dict.fromkeys(weights, 0)
        self.demand_ttl = demand_ttl
        self._demand: dict[str, dict[str, float]] = {q: {} for q in weights}

    def resize(self, weights: Mapping[str, int], slots: int) -> None:
        """Recompute quotas (e.g. after the pool's process count changed)."""
        self.quota = apportion(slots, weights)

    def _has_demand(self, queue: str, now: float) -> bool:
        waiting = self._demand.get(queue)
        if not waiting:
            return False
        stale = [job for job, stamp in waiting.items() if now - stamp > self.demand_ttl]
        for job in stale:
            del waiting[job]
        return bool(waiting)

    def reserved_for_others(self, queue: str, now: float) -> int:
        """Free slots that queues other than ``queue`` are owed right now."""
        return sum(
            max(0, self.quota.get(q, 0) - self.used.get(q, 0))
            for q in self._demand
            if q != queue and self._has_demand(q, now)
        )

    def allows(self, queue: str, free: int, now: float) -> bool:
        """May a job of ``queue`` take one of ``free`` slots?"""
        if free <= 0:
            return False
        if self.used.get(queue, 0) < self.quota.get(queue, 0):
            return True
        return free - self.reserved_for_others(queue, now) >= 1

    def refused(self, queue: str, job_id: str, now: float) -> None:
        """Remember that a job of ``queue`` is waiting."""
        self._demand.setdefault(queue, {})[job_id] = now

    def acquire(self, queue: str, job_id: str) -> None:
        """A job of ``queue`` started."""
        self.used[queue] = self.used.get(queue, 0) + 1
        waiting = self._demand.get(queue)
        if waiting:
            waiting.pop(job_id, None)

    def release(self, queue: str) -> None:
        """A job of ``queue`` ended."""
        self.used[queue] = max(0, self.used.get(queue, 0) - 1)

    def forget(self, job_id: str) -> None:
        """A waiting job went away without starting (cancelled while parked)."""
        for waiting in self._demand.values():
            waiting.pop(job_id, None)

    def waiting(self) -> dict[str, int]:
        """Queue -> number of jobs known to be waiting."""
        return {q: len(w) for q, w in self._demand.items() if w}
