"""In-flight bookkeeping for the session machine: deliveries, job records, the parking lot.

A *delivery* is what one server frame handed us: a single task (``Dispatch``) or a
batch (``BatchDispatch``). It becomes one *job* that occupies one local concurrency
slot while it runs. Deliveries that cannot start yet (slots full, the executor said
no, the queue's quota said wait, or the worker is draining) are *parked*: listed in every
Heartbeat, started later in the order the quota rule (``quota.py``) gives.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._protocol.build import positional_builder
from conveyor_sdk._protocol.types import CancelReason

__all__ = ["Delivery", "JobRecord", "JobState", "ParkingLot", "delivery_from_envelopes", "seconds"]


def seconds(msg: object) -> float:
    """A Timestamp or Duration in seconds, as ``ToNanoseconds() / 1e9`` gives it.

    A value outside protobuf's range is taken as it is (a deadline far in the past or future)
    instead of failing the frame, as ``ToNanoseconds`` would.
    """
    return (msg.seconds * 1_000_000_000 + msg.nanos) / 1e9  # type: ignore[attr-defined, no-any-return]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One dispatched unit of work, exactly as the server handed it over (never changed after)."""

    job_id: str
    queue: str
    type: str
    tasks: tuple[tpb.TaskEnvelope, ...]
    batch: bool  # arrived as BatchDispatch: answered with one BatchResult
    group: str
    received_at: float
    task_deadline: float | None  # tightest TaskOptions.deadline over the members
    timeout: float | None  # tightest TaskOptions.timeout over the members


_new_delivery = positional_builder(Delivery)


def delivery_from_envelopes(
    tasks: tuple[tpb.TaskEnvelope, ...],
    *,
    batch: bool,
    group: str,
    now: float,
    first_id: str = "",
) -> Delivery:
    """Build a Delivery, extracting the task-owned time bounds from the members' options.

    ``first_id``: the first member's id when the caller read it already (one protobuf read less).
    """
    deadlines: list[float] = []
    timeouts: list[float] = []
    for t in tasks:  # a plain loop: this runs for every Dispatch, on the way to the handler
        opts = t.options
        if opts.HasField("deadline"):
            deadlines.append(seconds(opts.deadline))
        if opts.HasField("timeout"):
            timeout = seconds(opts.timeout)
            if timeout > 0:
                timeouts.append(timeout)
    first = tasks[0]
    if len(tasks) > 1:
        opts = first.options  # the loop left the last member's
    return _new_delivery(  # Delivery's fields, in order
        f"batch:{first.id}" if batch else first_id or first.id,
        first.queue,
        first.type,
        tasks,
        batch,
        group or opts.group,
        now,
        min(deadlines) if deadlines else None,
        min(timeouts) if timeouts else None,
    )


class JobState(enum.Enum):
    PARKED = "parked"
    RUNNING = "running"


@dataclass(slots=True)
class JobRecord:
    """Mutable state of one job from delivery until its result is sent (or it is dropped)."""

    delivery: Delivery
    epoch: int  # connection number the delivery arrived on
    state: JobState = JobState.PARKED
    started_at: float | None = None
    deadline: float | None = None  # task-owned bound fixed at start (deadline, start + timeout)
    cancel_reason: CancelReason | None = None
    orphaned: bool = False  # its stream died: the server released it; the outcome is discarded

    def bound(self, lease_expiry: float) -> float:
        """Effective deadline now: the task bound, or the (moving) lease expiry if sooner."""
        return lease_expiry if self.deadline is None else min(self.deadline, lease_expiry)


class ParkingLot:
    """Per-queue FIFOs of parked job ids; which queue's head starts next is the quota's choice."""

    def __init__(self, queues: Iterable[str]) -> None:
        self._queues: dict[str, deque[str]] = {q: deque() for q in queues}
        self.size = 0  # parked ids (an attribute: read for every Dispatch)

    def park(self, queue: str, job_id: str) -> None:
        dq = self._queues.get(queue)
        if dq is None:  # a queue we did not declare (the quota serves it with weight 1)
            dq = self._queues[queue] = deque()
        dq.append(job_id)
        self.size += 1

    def remove(self, queue: str, job_id: str) -> None:
        dq = self._queues.get(queue)
        if dq is not None and job_id in dq:
            dq.remove(job_id)
            self.size -= 1

    def waiting(self) -> list[str]:
        """Queues with parked job ids."""
        return [q for q, dq in self._queues.items() if dq]

    def pick(self, eligible: Callable[[str], bool], choose: Callable[[list[str]], str | None]) -> str | None:
        """Pop the head of the queue ``choose`` takes among those whose head is eligible; None if none."""
        ready = [q for q, dq in self._queues.items() if dq and eligible(dq[0])]
        if not ready:
            return None
        queue = choose(ready)
        if queue is None:
            return None
        self.size -= 1
        return self._queues[queue].popleft()

    def ids(self) -> list[str]:
        return [jid for dq in self._queues.values() for jid in dq]

    def clear(self) -> None:
        for dq in self._queues.values():
            dq.clear()
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0
