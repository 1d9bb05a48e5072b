"""Supervisor-side metrics: counters, a duration histogram, Prometheus text, ``/healthz``, ``/readyz``.

:class:`Metrics` is an executor observer (see ``observe.py``); it aggregates
what the children report, so nothing is shared between processes. The HTTP
endpoint is a deliberately tiny HTTP/1.1 responder (GET only, one response per
connection) serving:

* ``/metrics`` - Prometheus text exposition format 0.0.4;
* ``/healthz`` - liveness: ``200 ok`` while the supervisor and its children are
  alive, ``503`` with the reason otherwise;
* ``/readyz`` - readiness: ``200 ok`` only while every pool's session is established
  (and has a ready child) and the worker is not draining, ``503`` with a short reason
  otherwise. Both answer from local state, no server round trip (see ``health.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from conveyor_sdk._worker.executor import Job, Outcome, OutcomeKind

if TYPE_CHECKING:
    from conveyor_sdk._runtime.proc import ChildProc

__all__ = ["BUCKETS", "Metrics", "MetricsServer"]

log = logging.getLogger("conveyor.runtime.metrics")
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


def _outcome_label(outcome: Outcome) -> str:
    if outcome.cancelled:
        return "canceled"
    return OutcomeKind(outcome.kind).name.lower()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


class Metrics:
    """Aggregated runtime metrics (an executor observer)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.tasks: Counter[tuple[str, str, str]] = Counter()  # (type, queue, outcome)
        self.hist: dict[tuple[str, str], list[int]] = {}  # (type, queue) -> bucket counts + [inf]
        self.hist_sum: dict[tuple[str, str], float] = {}
        self.in_flight: Counter[str] = Counter()  # queue
        self.restarts: Counter[str] = Counter()  # reason class
        self.children_started = 0
        self.finished_at: deque[float] = deque(maxlen=20000)
        self.failures = 0

    # -- observer hooks ------------------------------------------------------------
    def child_started(self, child: ChildProc) -> None:
        self.children_started += 1

    def child_exited(self, child: ChildProc) -> None:
        pass

    def child_restarted(self, child: ChildProc, reason: str) -> None:
        kind = "recycled" if reason == "recycled" else "killed" if reason.startswith("killed") else "crashed"
        self.restarts[kind] += 1

    def job_started(self, job: Job, child: ChildProc | None = None) -> None:
        self.in_flight[job.queue] += 1

    def job_finished(self, job: Job, outcomes: Sequence[Outcome], duration: float) -> None:
        self.in_flight[job.queue] = max(0, self.in_flight[job.queue] - 1)
        key = (job.type, job.queue)
        counts = self.hist.setdefault(key, [0] * (len(BUCKETS) + 1))
        for i, bound in enumerate(BUCKETS):
            if duration <= bound:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
        self.hist_sum[key] = self.hist_sum.get(key, 0.0) + duration
        now = self.clock()
        for outcome in outcomes:
            label = _outcome_label(outcome)
            self.tasks[(job.type, job.queue, label)] += 1
            # A timed-out or cancelled attempt is a failure too (its kind is RETRY; a drained one
            # is RELEASED): the live view's ``failures`` counts every attempt that did not finish.
            if outcome.kind is OutcomeKind.RETRY or outcome.kind is OutcomeKind.SKIP_RETRY:
                self.failures += 1
            self.finished_at.append(now)

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
    ) -> str:
        """Prometheus text exposition of everything.

        ``sessions``: pool -> session established; ``parked``: queue -> tasks delivered
        but not started (the server counts them in flight; they are heartbeated).
        """
        out = [
            "# HELP conveyor_tasks_total Tasks finished, by type, queue and outcome.",
            "# TYPE conveyor_tasks_total counter",
        ]
        for (type_, queue, outcome), n in sorted(self.tasks.items()):
            out.append(f"conveyor_tasks_total{_labels(type=type_, queue=queue, outcome=outcome)} {n}")
        out += [
            "# HELP conveyor_task_duration_seconds Handler run time measured in the child.",
            "# TYPE conveyor_task_duration_seconds histogram",
        ]
        for (type_, queue), counts in sorted(self.hist.items()):
            running = 0
            for bound, n in zip((*BUCKETS, float("inf")), counts, strict=True):
                running += n
                le = "+Inf" if bound == float("inf") else repr(bound)
                labels = _labels(type=type_, queue=queue, le=le)
                out.append(f"conveyor_task_duration_seconds_bucket{labels} {running}")
            base = _labels(type=type_, queue=queue)
            out.append(f"conveyor_task_duration_seconds_sum{base} {self.hist_sum[(type_, queue)]:.6f}")
            out.append(f"conveyor_task_duration_seconds_count{base} {running}")
        out += ["# HELP conveyor_tasks_in_flight Jobs running now.", "# TYPE conveyor_tasks_in_flight gauge"]
        for queue, n in sorted(self.in_flight.items()):
            out.append(f"conveyor_tasks_in_flight{_labels(queue=queue)} {n}")
        out += [
            "# HELP conveyor_tasks_parked Tasks delivered to this worker and heartbeated, not started yet.",
            "# TYPE conveyor_tasks_parked gauge",
        ]
        for queue, n in sorted((parked or {}).items()):
            out.append(f"conveyor_tasks_parked{_labels(queue=queue)} {n}")
        out += [
            "# HELP conveyor_session_up 1 while the pool's session is established.",
            "# TYPE conveyor_session_up gauge",
        ]
        for pool, up in sorted((sessions or {}).items()):
            out.append(f"conveyor_session_up{_labels(pool=pool)} {int(up)}")
        out += [
            "# HELP conveyor_child_restarts_total Child processes replaced, by reason.",
            "# TYPE conveyor_child_restarts_total counter",
        ]
        for reason in ("crashed", "killed", "recycled"):
            out.append(f"conveyor_child_restarts_total{_labels(reason=reason)} {self.restarts[reason]}")
        out += [
            "# HELP conveyor_children Child processes alive.",
            "# TYPE conveyor_children gauge",
            f"conveyor_children {children}",
        ]
        return "\n".join(out) + "\n"


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
