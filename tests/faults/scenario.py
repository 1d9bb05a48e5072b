"""Ledger-based network-fault scenarios: N tasks through a FaultProxy, every execution written down.

One run: a server (given by URL; the producer talks to it directly), a :class:`SyncFaultProxy`
in front of it, and a worker that reaches the server only through the proxy - the in-process
:class:`Worker` (``target="worker"``) or ``conveyor worker --processes 2`` (``"runtime"``).
The producer spreads ``tasks`` enqueues over the run; each handler appends ``start``/``done``
lines (task id, attempt, pid, CLOCK_MONOTONIC) to a ledger file. The fault starts
``warmup`` seconds in, lasts ``hold`` seconds, then heals; the run settles when every
acknowledged task finished or was archived (or ``settle`` seconds passed).

Reported (:class:`Report`):

* ``lost`` - acknowledged enqueues with no finished execution in the ledger (archived ones
  that never ran are counted apart),
* ``archived_unrun`` - tasks ARCHIVED with no ``start`` in the ledger,
* ``noticed`` - seconds from the fault until the worker showed it knew: its first warning or
  error log line, a phase other than ``open`` (in-process) or ``/readyz`` not 200 (runtime),
* ``readyz`` - seconds until ``/readyz`` said not ready (runtime only),
* ``resumed`` - seconds from the heal until the first execution that started after it,
* ``duplicates`` - tasks with more than one ``start`` (at-least-once allows them; printed).

Used by tests/faults (smoke sizes) and bench/faults_bench.py (the long runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Literal

from conveyor_sdk.client import Client
from conveyor_sdk.testing import SyncFaultProxy
from conveyor_sdk.types import RetryPolicy, RetryStrategy, TaskState
from conveyor_sdk.worker import Worker

Fault = Literal["blackhole", "drop-up", "drop-down", "latency", "resets", "refuse"]
FAULTS: tuple[Fault, ...] = ("blackhole", "drop-up", "drop-down", "latency", "resets", "refuse")
Target = Literal["worker", "runtime"]
TYPE = "fault.work"

APP = """
import asyncio, os, time
from conveyor_sdk.worker import Registry

app = Registry()
LEDGER = os.environ.get("FAULTS_LEDGER", "")


def note(kind, task):
    line = f"{kind} {task.id} {task.retried} {os.getpid()} {time.monotonic():.6f}\\n"
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one short O_APPEND write: whole lines from every process
    finally:
        os.close(fd)


@app.handler("fault.work")
async def work(task, ctx):
    note("start", task)
    await asyncio.sleep(float(task.payload.decode() or "0.1"))
    note("done", task)
"""


@dataclass
class Scenario:
    """One run's shape; ``worker_args`` go to Worker(...) or become ``--flag value`` for the CLI."""

    fault: Fault
    target: Target
    hold: float = 30.0
    tasks: int = 300
    work: float = 0.1
    warmup: float = 3.0
    after: float = 3.0
    settle: float = 60.0
    concurrency: int = 8
    max_retry: int = 5
    resets: int = 5
    worker_args: dict[str, object] = field(default_factory=dict)


@dataclass
class Report:
    fault: str
    target: str
    server: str
    acked: int = 0
    lost: int = 0
    archived_unrun: int = 0
    noticed: float | None = None
    readyz: float | None = None
    resumed: float | None = None
    duplicates: int = 0
    executions: int = 0
    noticed_by: str = ""
    notes: list[str] = field(default_factory=list)

    def row(self) -> str:
        def sec(v: float | None) -> str:
            return "-" if v is None else f"{v:.2f}"

        return (
            f"| {self.fault} | {self.target} | {self.server} | {self.lost} | {self.archived_unrun} "
            f"| {sec(self.noticed)} | {sec(self.readyz)} | {sec(self.resumed)} | {self.duplicates} "
            f"| {'; '.join(self.notes)} |"
        )


HEADER = (
    "| fault | target | server | lost | archived unrun | noticed s | readyz s | resumed s "
    "| duplicates | notes |\n|---|---|---|---|---|---|---|---|---|---|"
)


# -- targets ------------------------------------------------------------------------------------
class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[tuple[float, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((time.monotonic(), record.levelno, record.getMessage()))


class InProcess:
    """The in-process Worker on this loop; notices come from its log records and phase."""

    def __init__(self, sc: Scenario, url: str, queue: str, app: ModuleType) -> None:
        self.records = _Records()
        logger = logging.getLogger(f"faults.worker.{queue}")
        logger.propagate = False
        logger.addHandler(self.records)
        logger.setLevel(logging.DEBUG)
        kwargs: dict[str, object] = {"concurrency": sc.concurrency, "task_log": False, **sc.worker_args}
        self.worker = Worker(url, queues=[queue], logger=logger, **kwargs)  # type: ignore[arg-type]
        self.app = app
        self.phases: list[tuple[float, str]] = []
        self.run: asyncio.Task[None] | None = None
        self.watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.run = asyncio.create_task(self.worker.run(self.app.app))
        self.watch = asyncio.create_task(self._watch())
        await _until(lambda: self.worker.phase == "open", 30, "the worker's session")

    async def _watch(self) -> None:
        while True:
            phase = self.worker.phase
            if not self.phases or self.phases[-1][1] != phase:
                self.phases.append((time.monotonic(), phase))
            await asyncio.sleep(0.02)

    def noticed(self, since: float, until: float) -> tuple[float | None, float | None, str]:
        logs = [
            (t, m) for t, level, m in self.records.seen if since <= t < until and level >= logging.WARNING
        ]
        phases = [(t, f"phase {p}") for t, p in self.phases if since <= t < until and p != "open"]
        first = min(logs + phases, default=None)
        return (None if first is None else first[0] - since), None, first[1] if first else ""

    async def stop(self, notes: list[str]) -> None:
        assert self.run is not None and self.watch is not None
        self.watch.cancel()
        self.worker.stop()
        done, _ = await asyncio.wait({self.run}, timeout=40)
        if not done:
            notes.append("stop() did not end it in 40 s")
            self.worker.stop(immediate=True)
            done, _ = await asyncio.wait({self.run}, timeout=20)
        if not done:
            notes.append("nor stop(immediate=True)")
            self.run.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.run


class Runtime:
    """``conveyor worker --processes 2``; notices come from its warnings and ``/readyz``."""

    def __init__(self, sc: Scenario, url: str, queue: str, folder: Path, ledger: Path) -> None:
        extra = [a for k, v in sc.worker_args.items() for a in (f"--{k.replace('_', '-')}", str(v))]
        self.cmd = [
            sys.executable, "-m", "conveyor_cli", "worker", "faultapp:app", "--server", url,
            "--queue", f"{queue}=1", "--processes", "2", "--concurrency", str(sc.concurrency),
            "--metrics-port", "0", "--log-format", "json", "--no-task-log", *extra,
        ]  # fmt: skip
        self.env = {**os.environ, "FAULTS_LEDGER": str(ledger), "PYTHONUNBUFFERED": "1"}
        self.env.pop("CONVEYOR_ADDR", None)
        self.folder = folder
        self.lines: list[tuple[float, str]] = []
        self.ready: list[tuple[float, int]] = []
        self.proc: subprocess.Popen[str] | None = None
        self.reader = threading.Thread()
        self.metrics = ""
        self.watch: asyncio.Task[None] | None = None

    def _spawn(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            self.cmd, cwd=self.folder, env=self.env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.proc = proc
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        return proc

    async def start(self) -> None:
        proc = self._spawn()
        await _until(lambda: self._line("established") or proc.poll() is not None, 60, "established")
        if proc.poll() is not None:
            raise RuntimeError("conveyor worker exited:\n" + "".join(line for _, line in self.lines[-30:]))
        found = re.search(r"metrics listening on (http://[\d.:]+)", self._line("metrics listening") or "")
        self.metrics = found.group(1) if found else ""
        self.watch = asyncio.create_task(self._poll())

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def _line(self, text: str) -> str | None:
        return next((line for _, line in self.lines if text in line), None)

    def _readyz(self) -> int:
        try:
            with urllib.request.urlopen(self.metrics + "/readyz", timeout=2) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    async def _poll(self) -> None:
        while self.metrics:
            self.ready.append((time.monotonic(), await asyncio.to_thread(self._readyz)))
            await asyncio.sleep(0.1)

    def noticed(self, since: float, until: float) -> tuple[float | None, float | None, str]:
        logs = [(t, _message(line)) for t, line in self.lines if since <= t < until and _is_warning(line)]
        ready = [(t, f"readyz {code}") for t, code in self.ready if since <= t < until and code != 200]
        readyz = ready[0][0] - since if ready else None
        first = min(logs + ready, default=None)
        return (None if first is None else first[0] - since), readyz, first[1] if first else ""

    async def stop(self, notes: list[str]) -> None:
        assert self.proc is not None
        if self.watch is not None:
            self.watch.cancel()
        for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGKILL):
            self.proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(self.proc.wait, 40 if sig == signal.SIGTERM else 10)
                break
            notes.append(f"still running 40 s after {sig.name}")
        await asyncio.to_thread(self.reader.join, 5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _message(line: str) -> str:
    try:
        return str(json.loads(line).get("msg", line)).strip()
    except (ValueError, AttributeError):
        return line.strip()


def _is_warning(line: str) -> bool:
    try:
        level = str(json.loads(line).get("level", "")).lower()
    except (ValueError, AttributeError):
        return "WARNING" in line or "ERROR" in line
    return level in ("warning", "error", "critical")


async def _until(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


# -- the run ------------------------------------------------------------------------------------
def _load_app(folder: Path, ledger: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"faultapp_{id(folder)}", folder / "faultapp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.__dict__["LEDGER"] = str(ledger)  # the in-process app writes the same ledger
    return module


def _apply(proxy: SyncFaultProxy, sc: Scenario) -> tuple[float, float]:
    """Run the fault in this (worker) thread; returns (started, healed) on CLOCK_MONOTONIC."""
    begun = time.monotonic()
    if sc.fault == "resets":  # 5 resets spread over the hold; 'healed' is the last one
        for n in range(sc.resets):
            proxy.reset()
            last = time.monotonic()
            if n < sc.resets - 1:
                time.sleep(sc.hold / max(sc.resets - 1, 1))
        return begun, last
    if sc.fault == "refuse":  # open sessions break and nobody may connect again for the hold
        proxy.refuse()
        proxy.reset()
    elif sc.fault == "latency":
        proxy.latency(0.2)
    else:
        proxy.blackhole({"blackhole": "both", "drop-up": "up", "drop-down": "down"}[sc.fault])  # type: ignore[arg-type]
    time.sleep(sc.hold)  # the fault's duration is the point here, not a wait for a condition
    healed = time.monotonic()  # before heal(): it resets holed connections, which the worker sees
    proxy.heal()
    return begun, healed


def _ledger(path: Path) -> list[tuple[str, str, int, float]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        kind, task_id, _retried, _pid, at = line.split()
        rows.append((kind, task_id, int(_pid), float(at)))
    return rows


async def _produce(client: Client, sc: Scenario, queue: str, spread: float, acked: list[str]) -> None:
    policy = RetryPolicy(RetryStrategy.FIXED, base=0.2, max=0.2)
    start = time.monotonic()
    for n in range(sc.tasks):
        await asyncio.sleep(max(0.0, start + n * spread / sc.tasks - time.monotonic()))
        info = await client.enqueue(
            TYPE, str(sc.work).encode(), queue=queue, retention=3600, max_retry=sc.max_retry,
            retry_policy=policy,
        )  # fmt: skip
        acked.append(info.id)


async def _settle(client: Client, sc: Scenario, ledger: Path, acked: Sequence[str]) -> dict[str, TaskState]:
    """Wait until each acknowledged task finished (ledger) or is terminal; returns the unfinished' states."""
    deadline = time.monotonic() + sc.settle
    states: dict[str, TaskState] = {}
    while True:
        done = {row[1] for row in _ledger(ledger) if row[0] == "done"}
        states = {}
        for task_id in [t for t in acked if t not in done]:
            states[task_id] = (await client.get_task(task_id)).state
        open_ = [t for t, s in states.items() if s not in (TaskState.ARCHIVED, TaskState.COMPLETED)]
        if not open_ or time.monotonic() > deadline:
            return states
        await asyncio.sleep(0.2)


def _prepare(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "faultapp.py").write_text(APP)
    ledger = folder / "ledger.txt"
    ledger.unlink(missing_ok=True)
    return ledger


async def run(sc: Scenario, server_url: str, folder: Path, server_name: str = "ref") -> Report:
    """One scenario end to end; ``folder`` receives the app, the ledger and nothing else."""
    ledger = _prepare(folder)
    queue = f"faults{os.getpid()}x{int(time.time() * 1000) % 10**8}"
    report = Report(sc.fault, sc.target, server_name)
    with SyncFaultProxy(server_url.removeprefix("http://")) as proxy:
        target: InProcess | Runtime
        if sc.target == "worker":
            target = InProcess(sc, proxy.url, queue, _load_app(folder, ledger))
        else:
            target = Runtime(sc, proxy.url, queue, folder, ledger)
        async with Client(server_url) as client:
            await target.start()
            acked: list[str] = []
            producer = asyncio.create_task(_produce(client, sc, queue, sc.warmup + sc.hold + sc.after, acked))
            try:
                await asyncio.sleep(sc.warmup)  # work flows before the fault: the scenario's shape
                begun, healed = await asyncio.to_thread(_apply, proxy, sc)
                await producer
                states = await _settle(client, sc, ledger, acked)
            finally:
                producer.cancel()
                await target.stop(report.notes)
        _score(report, _ledger(ledger), acked, states)
        # Only what the worker showed during the fault counts: a heal resets holed connections,
        # so noticing after it says nothing about the worker.
        until = healed if sc.fault != "resets" else float("inf")
        report.noticed, report.readyz, report.noticed_by = target.noticed(begun, until)
        if report.noticed is None and sc.fault != "latency":
            report.notes.append("not noticed during the fault")
        elif report.noticed is not None and sc.fault == "latency":
            report.notes.append(f"spurious: {report.noticed_by}")
        starts = [at for kind, _, _, at in _ledger(ledger) if kind == "start" and at >= healed]
        report.resumed = min(starts) - healed if starts else None
    return report


def _score(
    report: Report,
    rows: list[tuple[str, str, int, float]],
    acked: Sequence[str],
    states: dict[str, TaskState],
) -> None:
    started: dict[str, int] = {}
    for kind, task_id, _, _ in rows:
        if kind == "start":
            started[task_id] = started.get(task_id, 0) + 1
    done = {row[1] for row in rows if row[0] == "done"}
    report.acked = len(acked)
    report.executions = sum(started.values())
    report.duplicates = sum(1 for n in started.values() if n > 1)
    unrun = [t for t in acked if states.get(t) is TaskState.ARCHIVED and t not in started]
    report.archived_unrun = len(unrun)
    report.lost = sum(1 for t in acked if t not in done and t not in unrun)
    open_ = sorted({s.name for t, s in states.items() if t not in done and s is not TaskState.ARCHIVED})
    if open_:
        report.notes.append("unsettled: " + ",".join(open_))
