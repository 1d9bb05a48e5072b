"""Custom metrics from handler code: counters, gauges and histograms exported with the worker's own.

Declare once (module level), update anywhere a handler runs::

    from conveyor_sdk import metrics

    SENT = metrics.counter("emails_sent_total", "Emails handed to the provider.", labels=("provider",))
    QUEUE = metrics.gauge("outbox_size", "Mails waiting in the local outbox.")
    RENDER = metrics.histogram("render_seconds", "Template render time.", buckets=(0.01, 0.1, 1.0))

    SENT.labels("ses").inc()          # or SENT.labels(provider="ses").inc()
    QUEUE.set(len(outbox))
    RENDER.observe(elapsed)

Where the values go:

* ``conveyor worker`` (child processes): each child ships what changed to the supervisor over
  its pipe (before the ``JobDone`` of the job that changed it, and with its heartbeat), and
  the supervisor's ``/metrics`` exports the aggregate: counters and histograms are summed over
  every child that ever ran (a recycled or crashed child's last totals are kept, so a counter
  never goes backwards), gauges are combined over the live children by their ``mode``.
* An in-process ``Worker``, ``conveyor worker --processes 0``, ``call_task`` and ``AppRunner``:
  the values stay in this process; read them with :func:`snapshot` / :func:`value`, or serve
  :func:`render` (``--processes 0`` exports them on ``--metrics-port``).

Bounded: at most 1,000 series per process (a new series past that is dropped and logged once
per metric). Declaring a name twice returns the same metric; declaring it differently raises
:class:`MetricError`, as do bad names, label mistakes and a negative counter increment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from conveyor_sdk._runtime.mstore import DEFAULT_BUCKETS, STORE, Family, GaugeMode, MetricError

__all__ = [
    "DEFAULT_BUCKETS",
    "Counter",
    "Gauge",
    "GaugeMode",
    "Histogram",
    "MetricError",
    "Sample",
    "counter",
    "gauge",
    "histogram",
    "render",
    "reset",
    "snapshot",
    "value",
]


class _Metric:
    """A family (``labels()`` picks a series) or, bound to label values, one series."""

    __slots__ = ("_cell", "_family", "_key", "_series")

    def __init__(self, family: Family, values: tuple[str, ...] | None = None) -> None:
        self._family = family
        self._series: dict[tuple[str, ...], _Metric] = {}
        if values is None and not family.labels:
            values = ()
        if values is None:
            self._key: tuple[str, tuple[str, ...]] | None = None
            self._cell: list[float] = []
        else:
            self._key, self._cell = STORE.cell(family, values)

    def __repr__(self) -> str:
        labels = "" if self._key is None else ",".join(self._key[1])
        return f"<{type(self).__name__} {self._family.name}{{{labels}}}>"

    def labels(self, *values: str, **named: str):  # type: ignore[no-untyped-def]  # typed in subclasses
        """The series for these label values (positional in declared order, or by name)."""
        family = self._family
        if self._key is not None and family.labels:
            raise MetricError(f"metric {family.name}: labels() on a series that already has its labels")
        if not family.labels:
            raise MetricError(f"metric {family.name} has no labels")
        if named:
            if values or set(named) != set(family.labels):
                want = ", ".join(family.labels)
                raise MetricError(
                    f"metric {family.name}: give every label ({want}) by name, or all by position"
                )
            values = tuple(named[name] for name in family.labels)
        if len(values) != len(family.labels) or not all(isinstance(v, str) for v in values):
            want = ", ".join(family.labels)
            raise MetricError(f"metric {family.name}: needs {len(family.labels)} label strings ({want})")
        series = self._series.get(values)
        if series is None:
            series = self._series[values] = type(self)(family, values)
        return series

    def _bound(self) -> tuple[tuple[str, tuple[str, ...]], list[float]]:
        if self._key is None:
            want = ", ".join(self._family.labels)
            raise MetricError(f"metric {self._family.name} has labels ({want}): call labels() first")
        return self._key, self._cell


class Counter(_Metric):
    """A count that only goes up (name it ``..._total``)."""

    __slots__ = ()

    def labels(self, *values: str, **named: str) -> Counter:
        """The series for these label values."""
        series: Counter = super().labels(*values, **named)
        return series

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount`` (>= 0)."""
        key, cell = self._bound()
        if not amount >= 0 or math.isinf(amount):
            raise MetricError(
                f"metric {self._family.name}: a counter increment must be finite and >= 0, not {amount!r}"
            )
        STORE.add(key, cell, amount)


class Gauge(_Metric):
    """A value that goes up and down (combined over children by the gauge's ``mode``)."""

    __slots__ = ()

    def labels(self, *values: str, **named: str) -> Gauge:
        """The series for these label values."""
        series: Gauge = super().labels(*values, **named)
        return series

    def set(self, value: float) -> None:
        """Set to ``value``."""
        key, cell = self._bound()
        STORE.set(key, cell, float(value))

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount`` (may be negative)."""
        key, cell = self._bound()
        STORE.add(key, cell, float(amount))

    def dec(self, amount: float = 1.0) -> None:
        """Subtract ``amount``."""
        self.inc(-amount)


class Histogram(_Metric):
    """Observations counted in buckets (``le`` upper bounds) with their sum."""

    __slots__ = ()

    def labels(self, *values: str, **named: str) -> Histogram:
        """The series for these label values."""
        series: Histogram = super().labels(*values, **named)
        return series

    def observe(self, value: float) -> None:
        """Count one observation of ``value``."""
        key, cell = self._bound()
        if math.isnan(value):
            raise MetricError(f"metric {self._family.name}: cannot observe NaN")
        STORE.observe(key, cell, self._family.buckets, float(value))


def _declare(family: Family) -> Family:
    return STORE.declare(family)


def counter(name: str, help: str = "", *, labels: Sequence[str] = ()) -> Counter:
    """Declare (or get) a counter."""
    return Counter(_declare(Family(name, "counter", help, tuple(labels))))


def gauge(name: str, help: str = "", *, labels: Sequence[str] = (), mode: GaugeMode = "sum") -> Gauge:
    """Declare (or get) a gauge. ``mode``: how the supervisor combines children's values.

    ``sum`` (default) and ``max`` / ``min`` are over the children alive now (an exited child's
    value no longer counts); ``last`` is the value most recently set by any child, kept after it exits.
    """
    return Gauge(_declare(Family(name, "gauge", help, tuple(labels), mode=mode)))


def histogram(
    name: str, help: str = "", *, labels: Sequence[str] = (), buckets: Sequence[float] = DEFAULT_BUCKETS
) -> Histogram:
    """Declare (or get) a histogram with these finite, ascending bucket bounds (``+Inf`` is added)."""
    return Histogram(
        _declare(Family(name, "histogram", help, tuple(labels), tuple(float(b) for b in buckets)))
    )


@dataclass(frozen=True, slots=True)
class Sample:
    """One series of this process: ``value`` (a histogram's sum), ``count`` and cumulative ``buckets``."""

    name: str
    kind: str
    labels: dict[str, str]
    value: float
    count: int = 0
    buckets: tuple[tuple[float, int], ...] = ()  # (le, cumulative count), ending with (inf, count)


def snapshot() -> list[Sample]:
    """Every series this process recorded, sorted by name and labels."""
    with STORE.lock:
        items = sorted((key, list(cell)) for key, cell in STORE.cells.items())
        families = dict(STORE.families)
    out: list[Sample] = []
    for (name, values), cell in items:
        family = families[name]
        labels = dict(zip(family.labels, values, strict=True))
        if family.kind != "histogram":
            out.append(Sample(name, family.kind, labels, cell[0]))
            continue
        running, buckets = 0, []
        for bound, n in zip((*family.buckets, math.inf), cell[1:], strict=True):
            running += int(n)
            buckets.append((bound, running))
        out.append(Sample(name, family.kind, labels, cell[0], running, tuple(buckets)))
    return out


def value(name: str, **labels: str) -> float:
    """A counter's or gauge's value in this process (a histogram's count); 0 for a series never touched."""
    for sample in snapshot():
        if sample.name == name and sample.labels == labels:
            return float(sample.count) if sample.kind == "histogram" else sample.value
    if name not in STORE.families:
        raise MetricError(f"no metric named {name!r} is declared in this process")
    return 0.0


def render() -> str:
    """This process's custom metrics in the Prometheus text format (0.0.4)."""
    from conveyor_sdk._runtime.custom import CustomMetrics

    return "\n".join(CustomMetrics(local=STORE).render()) + "\n"


def reset() -> None:
    """Every value back to 0 (for tests; declarations stay)."""
    STORE.reset()
