"""Pool planning (pure functions; no I/O, no clock).

Rules:

* Every declared queue belongs to exactly one pool. ``--pool NAME:QUEUES:N``
  declares an explicit pool of ``N`` processes serving ``QUEUES`` (comma
  separated); the queues no explicit pool names share the ``default`` pool,
  which gets the processes left over (at least one). Each pool has its own
  session (see ``supervisor.py``), so admission below only ever arbitrates
  between the queues of one pool.
* Inside a pool the queues share its slots by the one quota rule of
  ``conveyor_sdk._protocol.quota``, which the pool's session machine applies to every
  start (the same rule as an in-process Worker's); the executor only says whether a
  child has a free slot.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from conveyor_sdk._protocol.quota import apportion

__all__ = [
    "DEFAULT_POOL",
    "QUEUE_NAME",
    "PoolSpec",
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
