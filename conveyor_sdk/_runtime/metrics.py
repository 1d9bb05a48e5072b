"""Supervisor-side metrics: counters, histograms, capacity, Prometheus text, ``/healthz``, ``/readyz``.

:class:`Metrics` is an executor observer (see ``observe.py``); it aggregates
what the children report, so nothing is shared between processes. ``families.py``
renders it (docs/runtime.md, "Metrics", lists every family); ``custom.py``
aggregates the custom metrics handler code records. The HTTP endpoint is a
deliberately tiny HTTP/1.1 responder (GET only, one response per connection) serving:

* ``/metrics`` - Prometheus text exposition format 0.0.4;
* ``/healthz`` - liveness: ``200 ok`` while the supervisor and its children are
  alive, ``503`` with the reason otherwise;
* ``/readyz`` - readiness: ``200 ok`` only while every pool's session is established
  (and has a ready child) and the worker is not draining, ``503`` with a short reason
  otherwise. Both answer from local state, no server round trip (see ``health.py``).

The job hooks are fed by the process executor, or with ``--processes 0`` by the
in-process executor wrapped in ``observe.ObservedExecutor``: the same families either way.

Cardinality: ``queue`` and ``pool`` come from the configuration; ``type`` is a type
some child registered (its ``Ready``; with ``--processes 0`` the supervisor's registry;
any other type counts as ``other``); ``outcome``
and ``reason`` are fixed sets; ``child`` names live children only.

Per job the hooks do a few dict and list updates (a bisect per histogram); nothing
is formatted until a scrape.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from conveyor_sdk._runtime import pipe
from conveyor_sdk._runtime.custom import CustomMetrics
from conveyor_sdk._runtime.expo import escape as _escape
from conveyor_sdk._runtime.mstore import STORE, Family
from conveyor_sdk._worker.executor import Job, Outcome, OutcomeKind

if TYPE_CHECKING:
    from conveyor_sdk._runtime.proc import ChildProc

__all__ = ["BUCKETS", "OTHER_TYPE", "WAIT_BUCKETS", "Metrics", "MetricsServer"]

log = logging.getLogger("conveyor.runtime.metrics")
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
WAIT_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)
OTHER_TYPE = "other"  # the type label of a task whose type no child registered


_KIND_LABELS = {kind: kind.name.lower() for kind in OutcomeKind}  # a dict hit, not an enum lookup per task
_FAILED = frozenset((OutcomeKind.RETRY, OutcomeKind.SKIP_RETRY))


def _outcome_label(outcome: Outcome) -> str:
    return "canceled" if outcome.cancelled else _KIND_LABELS[outcome.kind]


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


class Histogram:
    """Per-bucket counts (``le`` semantics, the last one is +Inf) and the sum of one series."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value


class Metrics:
    """Aggregated runtime metrics (an executor observer)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, types: Collection[str] | None = None
    ) -> None:
        self.clock = clock
        self.wall: Callable[[], float] = time.time
        self.tasks: Counter[tuple[str, str, str]] = Counter()  # (type, queue, outcome)
        self.durations: dict[tuple[str, str, str], Histogram] = {}  # (type, queue, outcome)
        self.waits: dict[str, Histogram] = {}  # queue -> due-to-start wait of first attempts
        self.retries: Counter[str] = Counter()  # type -> failed attempts the server retries
        self.archived: Counter[str] = Counter()  # type -> failed attempts that archive the task
        self.in_flight: Counter[str] = Counter()  # queue -> jobs running in children (a queue has one pool)
        self.restarts: Counter[str] = Counter()  # reason class
        self.children_started = 0
        self.finished_at: deque[float] = deque(maxlen=20000)
        self.failures = 0
        # None: every type is its own label (no child has said what it registered yet).
        self.types: set[str] | None = set(types) if types is not None else None
        self._type_sets: set[int] = set()  # ids of the children's type sets merged into ``types``
        self.custom = CustomMetrics(local=STORE)

    def type_label(self, type_: str) -> str:
        """``type_`` if a child registered it, else ``other`` (a bounded label)."""
        types = self.types
        return type_ if types is None or type_ in types else OTHER_TYPE

    # -- observer hooks ------------------------------------------------------------
    def child_started(self, child: ChildProc) -> None:
        self.children_started += 1

    def child_exited(self, child: ChildProc) -> None:
        self.custom.retire(child.name)

    def child_restarted(self, child: ChildProc, reason: str) -> None:
        kind = "recycled" if reason == "recycled" else "killed" if reason.startswith("killed") else "crashed"
        self.restarts[kind] += 1

    def child_metrics(self, child: ChildProc, report: pipe.MetricsReport) -> None:
        families = [
            Family(f.name, f.kind, f.help, tuple(f.labels), tuple(f.buckets), f.mode)  # type: ignore[arg-type]
            for f in report.families
        ]
        samples = [(name, tuple(values), cell) for name, values, cell in report.samples]
        self.custom.update(child.name, families, samples, report.dropped)

    def job_started(self, job: Job, child: ChildProc | None = None) -> None:
        queue = job.queue
        self.in_flight[queue] += 1
        if child is not None:
            types = child.types
            if types and id(types) not in self._type_sets:
                self._type_sets.add(id(types))
                self.types = (self.types or set()) | types
        wait: Histogram | None = None
        now = 0.0
        for task in job.tasks:
            enqueued = task.enqueued_at
            if task.retried or enqueued is None:
                continue  # a retry's due time is not on the wire (process_at is as enqueued)
            if wait is None:
                wait = self.waits.get(queue) or self.waits.setdefault(queue, Histogram(WAIT_BUCKETS))
                now = self.wall()
            process_at = task.process_at
            due = enqueued if process_at is None or process_at < enqueued else process_at
            wait.observe(now - due if now > due else 0.0)  # clamped: the server's clock may be ahead

    def job_finished(self, job: Job, outcomes: Sequence[Outcome], duration: float) -> None:
        queue = job.queue
        running = self.in_flight[queue]
        self.in_flight[queue] = running - 1 if running > 0 else 0
        if not outcomes:
            return  # the executor raised (a contract breach it logs): nothing finished to count
        types = self.types
        type_ = job.type if types is None or job.type in types else OTHER_TYPE
        if len(outcomes) == 1:  # a single task: no list, no comparison
            labels: Sequence[str] = (job_outcome := _outcome_label(outcomes[0]),)
        else:
            labels = [_outcome_label(o) for o in outcomes]
            job_outcome = labels[0] if all(x == labels[0] for x in labels) else "mixed"
        key = (type_, queue, job_outcome)
        hist = self.durations.get(key)
        if hist is None:
            hist = self.durations[key] = Histogram(BUCKETS)
        hist.observe(duration)
        now = self.clock()
        tasks, counts = job.tasks, self.tasks
        for i, outcome in enumerate(outcomes):
            counts[(type_, queue, labels[i])] += 1
            self.finished_at.append(now)
            # A timed-out or cancelled attempt is a failure too (its kind is RETRY; a drained one
            # is RELEASED): the live view's ``failures`` counts every attempt that did not finish.
            if outcome.kind in _FAILED:
                self.failures += 1
                # The server archives once retried >= max_retry (protocol section 4), or on SkipRetry.
                task = tasks[i] if i < len(tasks) else None
                final = outcome.kind is OutcomeKind.SKIP_RETRY or (
                    task is not None and task.retried >= task.max_retry
                )
                (self.archived if final else self.retries)[type_] += 1

    # -- views ---------------------------------------------------------------------
    def rate(self, window: float = 5.0) -> float:
        """Tasks finished per second over the last ``window`` seconds."""
        now = self.clock()
        recent = sum(1 for t in self.finished_at if now - t <= window)
        return recent / window

    def render(
        self,
        children: int = 0,
        *,
        sessions: Mapping[str, bool] | None = None,
        parked: Mapping[str, int] | None = None,
        capacity: Any = None,
    ) -> str:
        """Prometheus text exposition of everything.

        ``sessions``: pool -> session established; ``parked``: queue -> tasks delivered
        but not started (the server counts them in flight; they are heartbeated);
        ``capacity``: a ``families.Capacity`` (slots, busy, parked per pool and queue; RSS per child).
        """
        from conveyor_sdk._runtime.families import render

        return render(self, children, sessions or {}, parked or {}, capacity)

    def render_for(self, supervisor: Any) -> str:
        """The exposition of a running :class:`Supervisor` (its sessions, pools and children)."""
        from conveyor_sdk._runtime.families import capacity_of

        sessions = {name: w.phase == "open" for name, w in supervisor.workers.items()}
        parked = {q: p for q, (_, p) in supervisor.in_flight().items()}
        return self.render(
            supervisor._children_alive(),
            sessions=sessions,
            parked=parked,
            capacity=capacity_of(supervisor, self),
        )


class MetricsServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0 picks one)."""

    def __init__(
        self,
        render: Callable[[], str],
        healthy: Callable[[], tuple[bool, str]],
        *,
        ready: Callable[[], tuple[bool, str]] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.render = render
        self.healthy = healthy
        self.ready = ready or healthy
        self.host, self.port = host, port
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        """Bind and return the real port."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def _respond(self, path: str) -> tuple[str, str, str]:
        if path == "/metrics":
            return "200 OK", "text/plain; version=0.0.4; charset=utf-8", self.render()
        if path in ("/healthz", "/readyz"):
            ok, text = self.healthy() if path == "/healthz" else self.ready()
            return ("200 OK" if ok else "503 Service Unavailable"), "text/plain", text + "\n"
        return "404 Not Found", "text/plain", "not found\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            method, path, *_ = request.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            status, ctype, body = (
                self._respond(path.split("?", 1)[0])
                if method in ("GET", "HEAD")
                else ("405 Method Not Allowed", "text/plain", "GET only\n")
            )
            data = body.encode()
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode() + (b"" if method == "HEAD" else data))
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            pass  # a broken scrape is the scraper's problem
        finally:
            writer.close()
