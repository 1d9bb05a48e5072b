"""The supervisor's aggregate of custom metrics (see :mod:`conveyor_sdk.metrics`): pure state, no I/O.

Each child reports cumulative cells (``mstore.py``) for the series that changed. We keep
the latest cells per live child; when a child is gone, its counters and histograms are
added into ``retired``, so the exported sum never goes backwards across crashes, recycling
or reload (only what a crashed child recorded after its last report is lost: at most one
heartbeat interval, never a finished job's, because a child reports before each JobDone).

Gauges are combined over the live sources by the family's mode: ``sum`` / ``max`` / ``min``;
``last`` is the value most recently received from any child, kept after that child exits.
The supervisor's own store (``local``: the in-process Worker with ``--processes 0``, or
code running in the supervisor) is one more live source (for gauges only while no child reported).

Bounded: at most ``max_series`` series in total; further ones are dropped (counted in
:attr:`CustomMetrics.dropped`, logged once per family). A family a child declares
differently from the first declaration seen (e.g. after a reload changed its buckets) is
dropped for that child, logged once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import replace

from conveyor_sdk._runtime.expo import labels_text, number
from conveyor_sdk._runtime.mstore import Family, MetricError, Store, check_family

__all__ = ["MAX_AGGREGATE_SERIES", "CustomMetrics", "SeriesKey"]

log = logging.getLogger("conveyor.runtime.metrics")
MAX_AGGREGATE_SERIES = 10_000
SeriesKey = tuple[str, tuple[str, ...]]


class CustomMetrics:
    """Custom metrics of every child, aggregated (see the module docstring)."""

    def __init__(self, local: Store | None = None, max_series: int = MAX_AGGREGATE_SERIES) -> None:
        self.local = local
        self.max_series = max_series
        self.families: dict[str, Family] = {}
        self.children: dict[str, dict[SeriesKey, list[float]]] = {}
        self.retired: dict[SeriesKey, list[float]] = {}
        self.last: dict[SeriesKey, tuple[int, float]] = {}  # mode="last" gauges: (arrival, value)
        self.child_dropped: dict[str, int] = {}  # what each live child dropped itself
        self.dropped = 0  # dropped here, plus what gone children had dropped
        self._known: set[SeriesKey] = set()
        self._conflicts: set[tuple[str, str]] = set()  # (child, family name)
        self._warned: set[str] = set()
        self._arrivals = 0

    def family(self, name: str) -> Family | None:
        found = self.families.get(name)
        if found is None and self.local is not None:
            found = self.local.families.get(name)
        return found

    # -- what children report -----------------------------------------------------------
    def update(
        self,
        child: str,
        families: Iterable[Family],
        samples: Iterable[tuple[str, tuple[str, ...], list[float]]],
        dropped: int = 0,
    ) -> None:
        """One child's report: families it had not announced, the cells that changed, its drop count."""
        for fam in families:
            known = self.family(fam.name)
            if known is None:
                try:
                    self.families[fam.name] = check_family(fam)  # a child is not trusted to be well formed
                except MetricError as exc:
                    log.warning("child %s sent a bad metric declaration: %s", child, exc.message)
            elif replace(known, help=fam.help) != fam:
                self._conflicts.add((child, fam.name))
                log.warning(
                    "child %s declares metric %s differently; its values are dropped", child, fam.name
                )
        self.child_dropped[child] = dropped
        series = self.children.setdefault(child, {})
        for name, values, cell in samples:
            family = self.family(name)
            key = (name, tuple(values))
            if family is None or (child, name) in self._conflicts or len(cell) != family.width():
                continue
            if len(values) != len(family.labels) or not self._admit(key, family):
                continue
            series[key] = cell
            if family.kind == "gauge" and family.mode == "last":
                self._arrivals += 1
                self.last[key] = (self._arrivals, cell[0])

    def _admit(self, key: SeriesKey, family: Family) -> bool:
        if key in self._known:
            return True
        if len(self._known) >= self.max_series:
            self.dropped += 1
            if family.name not in self._warned:
                self._warned.add(family.name)
                log.warning(
                    "metric %s: series dropped, the supervisor holds the maximum of %d",
                    family.name,
                    self.max_series,
                )
            return False
        self._known.add(key)
        return True

    def retire(self, child: str) -> None:
        """The child is gone: its counters and histograms stay counted, its gauges stop counting."""
        self.dropped += self.child_dropped.pop(child, 0)
        for key, cell in self.children.pop(child, {}).items():
            family = self.family(key[0])
            if family is None or family.kind == "gauge":
                continue
            total = self.retired.get(key)
            if total is None:
                self.retired[key] = list(cell)
            else:
                for i, v in enumerate(cell):
                    total[i] += v

    def total_dropped(self) -> int:
        """Series dropped anywhere: in live children, in gone ones, here and in the local store."""
        local = self.local.dropped if self.local is not None else 0
        return self.dropped + sum(self.child_dropped.values()) + local

    # -- exposition -----------------------------------------------------------------------
    def _sources(self) -> list[dict[SeriesKey, list[float]]]:
        live = list(self.children.values())
        if self.local is not None:
            with self.local.lock:
                local = {k: list(c) for k, c in self.local.cells.items()}
            if self.children or self.retired or self.last:
                # Children run the handlers: the supervisor's own gauges (declared by importing the
                # app, never set) would put a 0 into every max / min.
                local = {k: c for k, c in local.items() if (f := self.family(k[0])) and f.kind != "gauge"}
            live.append(local)
        return live

    def values(self) -> dict[SeriesKey, list[float]]:
        """Every exported series' aggregated cell."""
        live = self._sources()
        out: dict[SeriesKey, list[float]] = {k: list(c) for k, c in self.retired.items()}
        gauges: dict[SeriesKey, list[float]] = {}
        for source in live:
            for key, cell in source.items():
                family = self.family(key[0])
                if family is None:
                    continue
                if family.kind == "gauge":
                    gauges.setdefault(key, []).append(cell[0])
                    continue
                total = out.get(key)
                if total is None:
                    out[key] = list(cell)
                else:
                    for i, v in enumerate(cell):
                        total[i] += v
        for key, seen in gauges.items():
            family = self.family(key[0])
            mode = family.mode if family is not None else "sum"
            if mode == "last":
                arrived = self.last.get(key)
                out[key] = [arrived[1] if arrived is not None else seen[-1]]
            else:
                out[key] = [max(seen) if mode == "max" else min(seen) if mode == "min" else math.fsum(seen)]
        for key, (_, v) in self.last.items():  # a "last" gauge outlives the child that set it
            out.setdefault(key, [v])
        return out

    def render(self) -> list[str]:
        """Prometheus text lines of every custom family that has a series."""
        by_family: dict[str, list[tuple[tuple[str, ...], list[float]]]] = {}
        for (name, values), cell in self.values().items():
            by_family.setdefault(name, []).append((values, cell))
        lines: list[str] = []
        for name in sorted(by_family):
            family = self.family(name)
            if family is None:
                continue
            if family.help:
                lines.append(
                    f"# HELP {name} {family.help.replace(chr(92), chr(92) * 2).replace(chr(10), ' ')}"
                )
            lines.append(f"# TYPE {name} {family.kind}")
            for values, cell in sorted(by_family[name]):
                pairs = list(zip(family.labels, values, strict=True))
                if family.kind != "histogram":
                    lines.append(f"{name}{labels_text(pairs)} {number(cell[0])}")
                    continue
                running = 0.0
                for bound, n in zip((*family.buckets, math.inf), cell[1:], strict=True):
                    running += n
                    lines.append(
                        f"{name}_bucket{labels_text([*pairs, ('le', number(bound))])} {number(running)}"
                    )
                lines.append(f"{name}_sum{labels_text(pairs)} {number(cell[0])}")
                lines.append(f"{name}_count{labels_text(pairs)} {number(running)}")
        return lines
