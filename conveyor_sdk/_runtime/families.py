"""The runtime's ``/metrics`` families, rendered from :class:`Metrics` and the supervisor's state.

Capacity (slots, busy, parked per pool and queue) is read from the supervisor at scrape
time, never tracked per task beyond the executor's own counters. Every configured
queue and pool has its capacity series from the start (at 0), so ratios such as
``sum(conveyor_worker_busy) / sum(conveyor_worker_slots)`` are defined before the first task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from conveyor_sdk._runtime.expo import labels_text, number

__all__ = ["Capacity", "capacity_of", "render"]


class Histogram(Protocol):
    """What rendering reads of one histogram series (``metrics.Histogram`` is one)."""

    @property
    def bounds(self) -> tuple[float, ...]: ...
    @property
    def counts(self) -> list[int]: ...
    @property
    def total(self) -> float: ...


class CustomView(Protocol):
    def total_dropped(self) -> int: ...

    def render(self) -> list[str]: ...


class Metrics(Protocol):
    """What rendering reads of the runtime's counters. ``metrics.Metrics`` calls this module,
    so this module takes the shape (read-only) rather than importing it back."""

    @property
    def tasks(self) -> Mapping[tuple[str, str, str], int]: ...
    @property
    def durations(self) -> Mapping[tuple[str, str, str], Histogram]: ...
    @property
    def waits(self) -> Mapping[str, Histogram]: ...
    @property
    def retries(self) -> Mapping[str, int]: ...
    @property
    def archived(self) -> Mapping[str, int]: ...
    @property
    def in_flight(self) -> Mapping[str, int]: ...
    @property
    def restarts(self) -> Mapping[str, int]: ...
    @property
    def custom(self) -> CustomView: ...


@dataclass(slots=True)
class Capacity:
    """Scrape-time view of the worker's slots and children."""

    slots: dict[str, int] = field(default_factory=dict)  # pool -> slots (the session's concurrency)
    busy: dict[tuple[str, str], int] = field(default_factory=dict)  # (pool, queue) -> jobs running
    parked: dict[tuple[str, str], int] = field(
        default_factory=dict
    )  # (pool, queue) -> delivered, not started
    rss: list[tuple[str, str, int]] = field(default_factory=list)  # (pool, child, bytes) of live children


def capacity_of(supervisor: Any, metrics: Metrics) -> Capacity:
    """The capacity of a running supervisor: process pools, or its one in-process session."""
    cap = Capacity()
    ex = supervisor.executor
    workers = supervisor.workers
    if ex is None:
        worker = next(iter(workers.values()), None)
        running = worker.in_flight_by_queue() if worker is not None else {}
        cap.slots["default"] = supervisor.config.concurrency
        for queue in sorted({*supervisor.config.queues, *running}):
            busy, parked = running.get(queue, (0, 0))
            cap.busy[("default", queue)], cap.parked[("default", queue)] = busy, parked
        return cap
    running = dict(metrics.in_flight)  # a queue belongs to one pool (or to the only pool there is)
    for name, pool in ex.pools.items():
        cap.slots[name] = pool.capacity
        worker = workers.get(name)
        held = worker.in_flight_by_queue() if worker is not None else {}
        queues = {*pool.spec.queues, *held}
        if len(ex.pools) == 1:
            queues |= set(running)
        for queue in sorted(queues):
            cap.busy[(name, queue)] = running.get(queue, 0)
            cap.parked[(name, queue)] = held.get(queue, (0, 0))[1]
    cap.rss = sorted((c.pool, c.name, c.rss) for c in ex.children() if c.state.value in ("ready", "retiring"))
    return cap


def _family(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def _histogram(name: str, series: Mapping[Any, Histogram], label_names: tuple[str, ...]) -> Iterable[str]:
    for key in sorted(series):
        hist = series[key]
        values = key if isinstance(key, tuple) else (key,)
        pairs = list(zip(label_names, values, strict=True))
        running = 0
        for bound, n in zip((*hist.bounds, float("inf")), hist.counts, strict=True):
            running += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            yield f"{name}_bucket{labels_text([*pairs, ('le', le)])} {running}"
        yield f"{name}_sum{labels_text(pairs)} {hist.total:.6f}"
        yield f"{name}_count{labels_text(pairs)} {running}"


def _gauges(name: str, series: Mapping[Any, int], label_names: tuple[str, ...]) -> Iterable[str]:
    for key in sorted(series):
        values = key if isinstance(key, tuple) else (key,)
        yield f"{name}{labels_text(zip(label_names, values, strict=True))} {number(series[key])}"


def render(
    m: Metrics,
    children: int,
    sessions: Mapping[str, bool],
    parked: Mapping[str, int],
    capacity: Capacity | None,
) -> str:
    """Every family, in a fixed order (see docs/runtime.md, "Metrics")."""
    cap = capacity or Capacity()
    out = _family("conveyor_tasks_total", "counter", "Tasks finished, by type, queue and outcome.")
    out += _gauges("conveyor_tasks_total", m.tasks, ("type", "queue", "outcome"))
    out += _family("conveyor_task_duration_seconds", "histogram", "Handler run time, by outcome.")
    out += _histogram("conveyor_task_duration_seconds", m.durations, ("type", "queue", "outcome"))
    out += _family(
        "conveyor_worker_queue_wait_seconds",
        "histogram",
        "First attempts: time from due (enqueued, or process_at if later) to the handler's start.",
    )
    out += _histogram("conveyor_worker_queue_wait_seconds", m.waits, ("queue",))
    out += _family(
        "conveyor_worker_retries_total", "counter", "Failed attempts the server will retry, by type."
    )
    out += _gauges("conveyor_worker_retries_total", m.retries, ("type",))
    out += _family(
        "conveyor_worker_archived_total",
        "counter",
        "Failed attempts that archive their task (no retry left, or SkipRetry).",
    )
    out += _gauges("conveyor_worker_archived_total", m.archived, ("type",))
    out += _family("conveyor_worker_slots", "gauge", "Task slots: the pool's processes x slots per child.")
    out += _gauges("conveyor_worker_slots", cap.slots, ("pool",))
    out += _family("conveyor_worker_busy", "gauge", "Slots running a task, by pool and queue.")
    out += _gauges("conveyor_worker_busy", cap.busy, ("pool", "queue"))
    out += _family(
        "conveyor_worker_parked", "gauge", "Tasks delivered to this worker and waiting for a slot."
    )
    out += _gauges("conveyor_worker_parked", cap.parked, ("pool", "queue"))
    out += _family("conveyor_tasks_in_flight", "gauge", "Jobs running now.")
    out += _gauges("conveyor_tasks_in_flight", m.in_flight, ("queue",))
    out += _family(
        "conveyor_tasks_parked", "gauge", "Tasks delivered to this worker and heartbeated, not started yet."
    )
    out += _gauges("conveyor_tasks_parked", parked, ("queue",))
    out += _family("conveyor_session_up", "gauge", "1 while the pool's session is established.")
    out += _gauges("conveyor_session_up", {p: int(up) for p, up in sessions.items()}, ("pool",))
    out += _family("conveyor_child_restarts_total", "counter", "Child processes replaced, by reason.")
    out += _gauges(
        "conveyor_child_restarts_total",
        {r: m.restarts[r] for r in ("crashed", "killed", "recycled")},
        ("reason",),
    )
    out += _family("conveyor_children", "gauge", "Child processes alive.")
    out.append(f"conveyor_children {children}")
    out += _family("conveyor_child_rss_bytes", "gauge", "Resident memory of each live child process.")
    out += [f"conveyor_child_rss_bytes{labels_text([('pool', p), ('child', c)])} {n}" for p, c, n in cap.rss]
    out += _family(
        "conveyor_custom_series_dropped_total", "counter", "Custom metric series refused past the series cap."
    )
    out.append(f"conveyor_custom_series_dropped_total {m.custom.total_dropped()}")
    out += m.custom.render()
    return "\n".join(out) + "\n"
