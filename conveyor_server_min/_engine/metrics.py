"""The engine's Prometheus series, named and labelled as upstream conveyord exports them.

An operator's dashboards, alerts and KEDA triggers written for conveyord must work unchanged
on the reference server, so the names, types, labels and histogram buckets follow what
conveyord serves on its metrics listener (read from a running conveyord, see
docs/server-http.md "Metrics"):

* counters ``conveyor_{enqueued,dispatched,completed,failed,retried,archived,released}_total``
  (no labels);
* gauges ``conveyor_active`` (leased tasks), ``conveyor_sessions_active`` and
  ``conveyor_pending{queue}`` (tasks in PENDING, per queue), read from the broker at scrape time;
* histograms ``conveyor_queue_latency_seconds{queue}`` (due -> dispatch) and
  ``conveyor_process_duration_seconds{queue}`` (dispatch -> reported outcome), on
  OpenTelemetry's default bucket bounds, which conveyord keeps.

Pure bookkeeping: the engine reports transitions with the engine's ``now`` (nanoseconds);
nothing here reads a clock or does I/O. :func:`render` turns a snapshot into the text format.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from conveyor_server_min._engine.model import EventType, State, Task

__all__ = ["BUCKETS", "COUNTERS", "EngineMetrics", "Gauges", "Histogram", "render"]

# OpenTelemetry's default explicit bucket bounds (seconds), as conveyord exports them.
BUCKETS: tuple[float, ...] = (0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000)

COUNTERS: dict[str, str] = {
    "enqueued": "Tasks durably committed through the engine.",
    "dispatched": "Tasks handed to worker sessions.",
    "completed": "Successful executions reported back.",
    "failed": "Failed executions reported back.",
    "retried": "Executions returned for a later retry.",
    "archived": "Executions dead-lettered (retries exhausted, skip-retry, or cancel).",
    "released": "Deliveries returned to the queue for redelivery.",
}
_NS = 1e9


@dataclass(slots=True)
class Histogram:
    """Cumulative-at-render bucket counts for one label set."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0
    n: int = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1  # the first bound at or above it (or +Inf)
        self.total += seconds
        self.n += 1


@dataclass(frozen=True, slots=True)
class Gauges:
    """What the broker knows at scrape time."""

    active: int
    sessions: int
    pending: Mapping[str, int]


class EngineMetrics:
    """Counters and per-queue histograms fed by the engine's transitions."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.queue_latency: dict[str, Histogram] = {}
        self.process_duration: dict[str, Histogram] = {}

    def __repr__(self) -> str:
        return f"EngineMetrics({self.counters})"

    def enqueued(self, count: int = 1) -> None:
        self.counters["enqueued"] += count

    def moved(self, task: Task, previous: State, state: State, event: EventType | None, now: int) -> None:
        """One state change (called by ``Transitions.move`` before its consequences run)."""
        counters = self.counters
        if state is State.ACTIVE:
            counters["dispatched"] += 1
            waited = max(0, now - task.due) / _NS
            self.queue_latency.setdefault(task.queue, Histogram()).observe(waited)
        elif state is State.COMPLETED:
            counters["completed"] += 1
        elif state is State.RETRY:
            counters["retried"] += 1
        elif state is State.ARCHIVED:
            counters["archived"] += 1
        if event is EventType.RELEASED:
            counters["released"] += 1

    def reported(self, task: Task, failed: bool, now: int) -> None:
        """A worker reported an outcome for ``task`` (still ACTIVE, before the move)."""
        if failed:
            self.counters["failed"] += 1
        if task.started_at:
            ran = max(0, now - task.started_at) / _NS
            self.process_duration.setdefault(task.queue, Histogram()).observe(ran)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _histogram(name: str, help_text: str, series: Mapping[str, Histogram]) -> Iterable[str]:
    yield f"# HELP {name} {help_text}"
    yield f"# TYPE {name} histogram"
    for queue in sorted(series):
        hist, q = series[queue], _label(queue)
        running = 0
        for bound, count in zip(BUCKETS, hist.counts, strict=False):
            running += count
            yield f'{name}_bucket{{queue="{q}",le="{_number(bound)}"}} {running}'
        yield f'{name}_bucket{{queue="{q}",le="+Inf"}} {hist.n}'
        yield f'{name}_sum{{queue="{q}"}} {_number(hist.total)}'
        yield f'{name}_count{{queue="{q}"}} {hist.n}'


def render(metrics: EngineMetrics, gauges: Gauges) -> str:
    """The Prometheus text exposition format (0.0.4) of every series."""
    lines: list[str] = [
        "# HELP conveyor_active Executions currently in flight.",
        "# TYPE conveyor_active gauge",
        f"conveyor_active {gauges.active}",
        "# HELP conveyor_sessions_active Live worker sessions.",
        "# TYPE conveyor_sessions_active gauge",
        f"conveyor_sessions_active {gauges.sessions}",
        "# HELP conveyor_pending Tasks due and waiting to dispatch, per queue.",
        "# TYPE conveyor_pending gauge",
    ]
    lines += [f'conveyor_pending{{queue="{_label(q)}"}} {n}' for q, n in sorted(gauges.pending.items())]
    for key, help_text in COUNTERS.items():
        name = f"conveyor_{key}_total"
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {metrics.counters[key]}"]
    lines += _histogram(
        "conveyor_queue_latency_seconds", "Time a task waited from becoming due to dispatch.",
        metrics.queue_latency,
    )  # fmt: skip
    lines += _histogram(
        "conveyor_process_duration_seconds", "Task execution time from dispatch to completion.",
        metrics.process_duration,
    )  # fmt: skip
    return "\n".join(lines) + "\n"
