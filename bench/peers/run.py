"""Side-by-side: our runtime against Celery, Dramatiq, Taskiq (Redis) and conveyorq, at defaults.

Four workloads per system, in interleaved rounds (each round runs every system once, in a
rotated order, each on a fresh broker), medians printed as one table with ratios to
``conveyor worker`` at its defaults:

* no-op throughput: N tasks enqueued before the worker starts; timed from the first task's
  completion to the last (start-up excluded), CPU per task = worker tree + broker/server;
* enqueue->start latency, p50/p99, with an idle worker (one task at a time, a pause between);
* 5 ms CPU-bound tasks (plain ``def`` handlers), throughput against the machine's limit;
* one producer's sequential single enqueues per second (no worker running), its CPU and the
  broker's per enqueue.

    .venv/bin/python bench/peers/run.py [--rounds 3] [--variants] [--conveyord-bin PATH]
    .venv/bin/python bench/peers/run.py --smoke      # a few hundred tasks; exit 1 unless all completed

Peers run from their own venv (bench/peers/README.md); a system whose venv or redis-server is
missing is skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "apps"), str(HERE.parents[1])]

import common  # noqa: E402
from _procs import Broker, cpu_delta, start_conveyord, start_ours, start_redis, stop, tree, tree_cpu  # noqa: E402
from _systems import APPS, CONVEYORD, CONVEYORD_VARIANTS, OURS, PYTHONPATH, REDIS, VARIANTS, System  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    noop: int
    lat: int
    cpu: int
    seq: int
    timeout: float


FULL = Sizes(noop=10_000, lat=100, cpu=600, seq=1000, timeout=300)  # no-op: issue 32 measured 10,000
SMOKE = Sizes(noop=200, lat=5, cpu=30, seq=30, timeout=120)


@dataclass
class Run:
    """One system in one round (None: that workload failed; ``error`` says why)."""

    noop_rate: float | None = None
    noop_cpu_us: float | None = None
    broker_cpu_us: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    cpu_rate: float | None = None
    seq_rate: float | None = None
    seq_producer_us: float | None = None
    seq_broker_us: float | None = None
    errors: list[str] = field(default_factory=list)


class Bench:
    def __init__(self, sizes: Sizes, conveyord: tuple[str, int] | None, conveyord_bin: str = "") -> None:
        self.sizes = sizes
        self.conveyord = conveyord  # a running node, shared by every run
        self.conveyord_bin = conveyord_bin  # or a fresh node per run, as for Redis
        self.serial = 0

    # -- one system, one round ------------------------------------------------------
    def run(self, system: System) -> Run:
        self.serial += 1
        queue = f"peers{os.getpid()}x{self.serial}"
        result = Run()
        with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
            out = Path(tmp)
            broker = self._broker(system, out)
            env = {
                **os.environ,
                "PEERS_OUT": str(out),
                "PEERS_BROKER": broker.url,
                "PEERS_QUEUE": queue,
                "PEERS_ROUNDS": str(common.ROUNDS),
                "PYTHONPATH": PYTHONPATH,
            }
            env.pop("VIRTUAL_ENV", None)
            try:
                self._throughput(system, broker, env, out, result)
                self._cpu_bound(system, broker, env, out, result)
                self._sequential(system, broker, env, result)
            except Exception as exc:  # a failed system is reported, the others still run
                result.errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                broker.close()
        return result

    def _broker(self, system: System, out: Path) -> Broker:
        if system.broker == "redis":
            return start_redis(out)
        if system.broker == "conveyord":
            if self.conveyord_bin:
                return start_conveyord(self.conveyord_bin, out)
            assert self.conveyord is not None
            return Broker(*self.conveyord)
        return start_ours()

    def _produce(self, system: System, env: dict[str, str], action: str, n: int, **extra: str) -> str:
        cmd = [system.python, str(APPS / "produce.py"), system.key, action, str(n)]
        done = subprocess.run(
            cmd,
            env={**env, **extra},
            cwd=APPS,
            capture_output=True,
            text=True,
            check=False,
            timeout=self.sizes.timeout,
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"producer {action} exited {done.returncode}: {tail[0]}")
        return done.stdout

    def _worker(
        self, system: System, broker: Broker, env: dict[str, str], phase: str
    ) -> subprocess.Popen[bytes]:
        cmd = system.command(broker.url, env["PEERS_QUEUE"], phase)
        return subprocess.Popen(
            cmd,
            cwd=APPS,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _timed(
        self, proc: subprocess.Popen[bytes], broker: Broker, path: Path, n: int
    ) -> tuple[float, int, float, float]:
        """Wait for the first and the n-th byte in ``path``: (seconds, tasks, worker CPU, broker CPU)."""
        deadline = time.monotonic() + self.sizes.timeout
        while _size(path) < 1:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited {proc.returncode} before its first task")
            if time.monotonic() > deadline:
                raise RuntimeError("no task completed")
            time.sleep(0.002)
        t0 = time.perf_counter()
        worker0, broker0 = tree_cpu(tree(proc.pid)), tree_cpu([broker.pid])
        first = _size(path)
        while (done := _size(path)) < n:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{done} of {n} {path.name} tasks completed")
            time.sleep(0.005)
        seconds = time.perf_counter() - t0
        return seconds, max(1, n - first), cpu_delta(worker0), cpu_delta(broker0)

    def _throughput(
        self, system: System, broker: Broker, env: dict[str, str], out: Path, result: Run
    ) -> None:
        n = self.sizes.noop
        self._produce(system, env, "fill", n, PEERS_KIND="noop")
        proc = self._worker(system, broker, env, "noop")
        try:
            seconds, counted, worker_cpu, broker_cpu = self._timed(proc, broker, out / "noop", n)
            result.noop_rate = counted / seconds
            result.noop_cpu_us = (worker_cpu + broker_cpu) / counted * 1e6
            result.broker_cpu_us = broker_cpu / counted * 1e6
            self._produce(system, env, "lat", self.sizes.lat)
            samples = sorted(float(x) for x in (out / "lat").read_text().split())
            result.p50_ms = statistics.median(samples) * 1e3
            result.p99_ms = samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e3
        finally:
            stop(proc)

    def _cpu_bound(self, system: System, broker: Broker, env: dict[str, str], out: Path, result: Run) -> None:
        n = self.sizes.cpu
        self._produce(system, env, "fill", n, PEERS_KIND="cpu")
        proc = self._worker(system, broker, env, "cpu")
        try:
            seconds, counted, _, _ = self._timed(proc, broker, out / "cpu", n)
            result.cpu_rate = counted / seconds
        finally:
            stop(proc)

    def _sequential(self, system: System, broker: Broker, env: dict[str, str], result: Run) -> None:
        n = self.sizes.seq
        before = tree_cpu([broker.pid])
        report = json.loads(self._produce(system, env, "seq", n))
        broker_cpu = cpu_delta(before)
        result.seq_rate = n / report["seconds"]
        result.seq_producer_us = report["cpu"] / n * 1e6
        result.seq_broker_us = broker_cpu / n * 1e6  # includes the producer's connect


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def calibrate() -> int:
    """Rounds of ``common.work`` that take 5 ms on one core here (best of 5)."""
    rounds = 20000
    best = min(_timed_work(rounds) for _ in range(5))
    return int(rounds * 0.005 / best)


def _timed_work(rounds: int) -> float:
    t0 = time.perf_counter()
    common.work(rounds)
    return time.perf_counter() - t0


COLUMNS = [  # (header, attribute, format); ratios are to the first row (ours at defaults)
    ("no-op tasks/s", "noop_rate", "{:,.0f}"),
    ("CPU us/task (broker)", "noop_cpu_us", "{:,.0f}"),
    ("p50 ms", "p50_ms", "{:.2f}"),
    ("p99 ms", "p99_ms", "{:.2f}"),
    ("5 ms CPU tasks/s", "cpu_rate", "{:,.0f}"),
    ("enqueues/s", "seq_rate", "{:,.0f}"),
    ("producer+broker us/enqueue", "seq_producer_us", "{:,.0f}"),
]


def _median(runs: list[Run], attr: str) -> float | None:
    values = [getattr(r, attr) for r in runs if getattr(r, attr) is not None]
    return statistics.median(values) if values else None


def _cell(runs: list[Run], attr: str, fmt: str, base: float | None) -> str:
    value = _median(runs, attr)
    if value is None:
        return "-"
    text = fmt.format(value)
    if attr == "noop_cpu_us":
        broker = _median(runs, "broker_cpu_us")
        text += f" ({broker:,.0f})" if broker is not None else ""
    elif attr == "seq_producer_us":
        broker = _median(runs, "seq_broker_us")
        text += f" + {broker:,.0f}" if broker is not None else ""
    if base and attr not in ("seq_producer_us",):
        text += f" [{value / base:.2f}x]"
    return text


def table(results: dict[str, list[Run]], limit: float) -> str:
    """Markdown table of medians; [Nx] = this system's value / the first row's."""
    names = list(results)
    base_runs = results[names[0]]
    head = ["system", *(c[0] for c in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        runs = results[name]
        cells = [_cell(runs, attr, fmt, _median(base_runs, attr)) for _, attr, fmt in COLUMNS]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    lines.append(f"\n5 ms CPU tasks: the machine's limit is {limit:,.0f}/s ({os.cpu_count()} cores / 5 ms).")
    lines.append("CPU us/task: worker processes + broker/server (broker/server alone in parentheses).")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a few hundred tasks, one round; exit 1 unless every system completed",
    )
    parser.add_argument("--variants", action="store_true", help="also the old defaults and --concurrency 64")
    parser.add_argument("--only", default="", help="comma-separated substrings of the system names to run")
    parser.add_argument("--no-peers", action="store_true", help="only our own systems")
    parser.add_argument("--conveyord", default="", help="URL of a running conveyord (adds its rows)")
    parser.add_argument("--conveyord-pid", type=int, default=0, help="its pid, for its CPU")
    parser.add_argument(
        "--conveyord-bin",
        default="",
        help="a conveyord binary: a fresh node for each run (adds its rows; preferred to --conveyord)",
    )
    parser.add_argument("--json", default="", help="also write every run's figures to this file")
    opts = parser.parse_args()
    sizes = SMOKE if opts.smoke else FULL
    rounds = 1 if opts.smoke else max(1, opts.rounds)
    systems = [*OURS, *(VARIANTS if opts.variants else []), *REDIS]
    if opts.conveyord or opts.conveyord_bin:
        systems += [*CONVEYORD, *(CONVEYORD_VARIANTS if opts.variants else [])]
    if opts.no_peers:
        systems = [s for s in systems if not s.peer]
    if opts.only:
        wanted = [w.strip() for w in opts.only.split(",")]
        systems = [s for s in systems if s is OURS[0] or any(w in s.name for w in wanted)]
    runnable = []
    for system in systems:
        why = system.missing()
        if why:
            print(f"skipped {system.name}: {why}")
        else:
            runnable.append(system)
    common.ROUNDS = calibrate()
    limit = (os.cpu_count() or 1) / 0.005
    print(
        f"CPU task: {common.ROUNDS} rounds (~5 ms on one core); load {os.getloadavg()[0]:.1f}; "
        f"{rounds} round(s) of {len(runnable)} systems",
        flush=True,
    )
    shared = (opts.conveyord, opts.conveyord_pid) if opts.conveyord else None
    bench = Bench(sizes, shared, opts.conveyord_bin)
    results: dict[str, list[Run]] = {s.name: [] for s in runnable}
    for r in range(rounds):
        order = (
            runnable[r % len(runnable) :] + runnable[: r % len(runnable)]
        )  # rotate: no system always first
        for system in order:
            run = bench.run(system)
            results[system.name].append(run)
            status = "; ".join(run.errors) or "ok"
            print(f"round {r + 1} {system.name}: {status} (no-op {run.noop_rate or 0:,.0f}/s)", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}\n")
    print(table(results, limit))
    if opts.json:
        Path(opts.json).write_text(
            json.dumps({k: [vars(r) for r in v] for k, v in results.items()}, indent=1)
        )
    failed = [name for name, runs in results.items() if any(r.errors for r in runs)]
    if failed:
        print(f"\nnot completed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
