"""Default concurrency, from what the app's handlers are (one rule for the CLI and the Worker).

Why these numbers (measured in docs/performance.md):

* Async handlers cost one asyncio task each while they wait, so slots are cheap; too few of
  them leave the worker waiting on round trips (a Result goes out, the next Dispatch comes
  back) instead of running handlers. 64 slots per child process keep the session's pipeline
  full: with the supervisor batching Results and RunJobs per loop turn, 2 processes ran no-op
  tasks about 7% faster, at about 9% less server CPU per task, than with 32 each (stop 39).
  That is still fewer than Taskiq's 100 per process, so a backlog is spread over workers
  rather than hoarded by one. The in-process Worker runs its handlers in the process that
  holds the session; 64 keeps its pipeline full.
* A sync handler holds a thread for its whole run, and every thread of a process shares
  one GIL. 8 threads per process (Dramatiq's default) overlap handlers that block on I/O
  and already saturate a core with CPU-bound ones; more would only hold more tasks
  (leased, heartbeated, not running) away from other workers and stretch each task's
  wall time. An app with any sync handler gets this figure: its slots are shared.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

__all__ = [
    "ASYNC_SLOTS_PER_PROCESS",
    "IN_PROCESS_ASYNC_SLOTS",
    "SYNC_SLOTS_PER_PROCESS",
    "default_concurrency",
]

ASYNC_SLOTS_PER_PROCESS = 64
IN_PROCESS_ASYNC_SLOTS = 64
SYNC_SLOTS_PER_PROCESS = 8


class _Spec(Protocol):
    @property
    def is_async(self) -> bool: ...


def default_concurrency(handlers: Iterable[_Spec], processes: int) -> int:
    """Tasks at once when none was given: ``processes`` children (0 = in-process)."""
    if any(not spec.is_async for spec in handlers):
        return SYNC_SLOTS_PER_PROCESS * max(1, processes)
    if processes <= 0:
        return IN_PROCESS_ASYNC_SLOTS
    return ASYNC_SLOTS_PER_PROCESS * processes
