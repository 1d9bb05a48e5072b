"""One process's custom metrics (what handler code records through :mod:`conveyor_sdk.metrics`).

A :class:`Store` holds families (name, kind, labels, buckets) and one *cell* per series: a
small list of floats (counter / gauge: ``[value]``; histogram: ``[sum, n_0, ..., n_inf]``,
per-bucket counts, not cumulative). Handler threads update cells under one lock; the
runtime's child ships the cells that changed (:meth:`Store.collect`) to the supervisor,
which aggregates them (``custom.py``). Values are cumulative since the process started,
so a lost or repeated report never double-counts.

Memory is bounded: at most ``max_series`` series per process. A new series past the cap is
not created; its updates go to a scratch cell, counted in :attr:`Store.dropped` and logged
once per family.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
import threading
from dataclasses import dataclass, replace
from typing import Literal

from conveyor_sdk.errors import InvalidArgument

__all__ = [
    "DEFAULT_BUCKETS",
    "MAX_SERIES",
    "STORE",
    "Family",
    "GaugeMode",
    "Kind",
    "MetricError",
    "Store",
    "check_family",
]

log = logging.getLogger("conveyor.metrics")

Kind = Literal["counter", "gauge", "histogram"]
GaugeMode = Literal["sum", "max", "min", "last"]
KINDS: tuple[Kind, ...] = ("counter", "gauge", "histogram")
MODES: tuple[GaugeMode, ...] = ("sum", "max", "min", "last")
MAX_SERIES = 1000  # per process; the supervisor caps its aggregate separately
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_RESERVED_LABELS = frozenset({"le", "quantile"})


class MetricError(InvalidArgument):
    """A custom metric was declared or used wrongly (name, labels, amount, or a conflicting redeclaration)."""


@dataclass(frozen=True, slots=True)
class Family:
    """What a metric is: everything but its values."""

    name: str
    kind: Kind
    help: str = ""
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()  # histograms: finite upper bounds, ascending (+Inf implied)
    mode: GaugeMode = "sum"  # gauges: how the supervisor combines the children's values

    def width(self) -> int:
        """Length of one series' cell."""
        return len(self.buckets) + 2 if self.kind == "histogram" else 1


def check_family(family: Family) -> Family:
    """``family`` if it is well formed; raises MetricError naming what is wrong."""
    if not isinstance(family.name, str) or not _NAME.match(family.name):
        raise MetricError(f"metric name {family.name!r} is not a Prometheus name ([a-zA-Z_:][a-zA-Z0-9_:]*)")
    if family.name.startswith("conveyor_"):
        raise MetricError(
            f"metric name {family.name!r}: the conveyor_ prefix is reserved for the runtime's own"
        )
    if family.kind not in KINDS:
        raise MetricError(f"metric {family.name}: kind {family.kind!r} is not one of {', '.join(KINDS)}")
    if family.mode not in MODES:
        raise MetricError(f"metric {family.name}: mode {family.mode!r} is not one of {', '.join(MODES)}")
    for label in family.labels:
        if not isinstance(label, str) or not _LABEL.match(label) or label.startswith("__"):
            raise MetricError(f"metric {family.name}: label name {label!r} is not valid")
        if label in _RESERVED_LABELS:
            raise MetricError(f"metric {family.name}: label name {label!r} is reserved")
    if len(set(family.labels)) != len(family.labels):
        raise MetricError(f"metric {family.name}: label names repeat: {', '.join(family.labels)}")
    if family.kind == "histogram":
        bounds = family.buckets
        if not bounds or any(not math.isfinite(b) for b in bounds) or list(bounds) != sorted(set(bounds)):
            raise MetricError(f"metric {family.name}: buckets must be finite, ascending and distinct")
    elif family.buckets:
        raise MetricError(f"metric {family.name}: only a histogram has buckets")
    return family


class Store:
    """Families and series of one process (see the module docstring); every method is thread-safe."""

    def __init__(self, max_series: int = MAX_SERIES) -> None:
        self.max_series = max_series
        self.families: dict[str, Family] = {}
        self.cells: dict[tuple[str, tuple[str, ...]], list[float]] = {}
        self.dirty: set[tuple[str, tuple[str, ...]]] = set()
        self.dropped = 0
        self.lock = threading.Lock()
        self._announced: set[str] = set()  # families already sent with a collect()
        self._warned: set[str] = set()

    def declare(self, family: Family) -> Family:
        """Register ``family`` (idempotent for an identical one). Raises MetricError on a conflict."""
        check_family(family)
        with self.lock:
            known = self.families.get(family.name)
            if known is None:
                self.families[family.name] = family
                if not family.labels:
                    self._cell(family, ())  # an unlabelled series exists (at 0) from its declaration
                return family
        if replace(known, help=family.help) != family:  # the help text may differ
            raise MetricError(f"metric {family.name} is already declared differently: {_describe(known)}")
        return known

    def cell(
        self, family: Family, values: tuple[str, ...]
    ) -> tuple[tuple[str, tuple[str, ...]], list[float]]:
        """The series' key and cell, created if new (a scratch cell past the cap)."""
        key = (family.name, values)
        found = self.cells.get(key)
        if found is not None:
            return key, found
        with self.lock:
            return key, self._cell(family, values)

    def _cell(self, family: Family, values: tuple[str, ...]) -> list[float]:
        key = (family.name, values)
        found = self.cells.get(key)
        if found is not None:
            return found
        fresh = [0.0] * family.width()
        if len(self.cells) >= self.max_series:
            self.dropped += 1
            if family.name not in self._warned:
                self._warned.add(family.name)
                log.warning(
                    "metric %s: series %s dropped, this process already has the maximum of %d series",
                    family.name,
                    dict(zip(family.labels, values, strict=True)),
                    self.max_series,
                )
            return fresh  # a scratch cell: updates are accepted and lost
        self.cells[key] = fresh
        self.dirty.add(key)
        return fresh

    def add(self, key: tuple[str, tuple[str, ...]], cell: list[float], amount: float) -> None:
        """Counter / gauge: add ``amount``."""
        with self.lock:
            cell[0] += amount
            self.dirty.add(key)

    def set(self, key: tuple[str, tuple[str, ...]], cell: list[float], value: float) -> None:
        """Gauge: set to ``value``."""
        with self.lock:
            cell[0] = value
            self.dirty.add(key)

    def observe(
        self, key: tuple[str, tuple[str, ...]], cell: list[float], bounds: tuple[float, ...], v: float
    ) -> None:
        """Histogram: count ``v`` in its bucket (``le`` semantics) and add it to the sum."""
        at = bisect.bisect_left(bounds, v) + 1  # cell[0] is the sum
        with self.lock:
            cell[0] += v
            cell[at] += 1
            self.dirty.add(key)

    def collect(
        self, everything: bool = False
    ) -> tuple[list[Family], list[tuple[str, tuple[str, ...], list[float]]]]:
        """Families not announced yet and the changed series (all with ``everything``), clearing the marks."""
        with self.lock:
            cells = self.cells
            keys = list(cells) if everything else [k for k in self.dirty if k in cells]  # not scratch cells
            self.dirty.clear()
            samples = [(name, values, list(cells[(name, values)])) for name, values in keys]
            fresh = sorted({name for name, _ in keys} - self._announced)
            self._announced.update(fresh)
            return [self.families[name] for name in fresh], samples

    def reset(self) -> None:
        """Every value back to 0, in place (series objects handed out keep their cells)."""
        with self.lock:
            for key, cell in self.cells.items():
                cell[:] = [0.0] * len(cell)
                self.dirty.add(key)
            self.dropped = 0


def _describe(family: Family) -> str:
    extra = f", buckets {list(family.buckets)}" if family.buckets else ""
    mode = f", mode {family.mode}" if family.kind == "gauge" else ""
    return f"{family.kind} with labels ({', '.join(family.labels)}){extra}{mode}"


STORE = Store()  # this process's metrics: what conveyor_sdk.metrics records and the runtime ships
