"""Process pools vs in-process execution, end to end against the reference server.

Prints, side by side from one run:

* CPU-bound handler (~5 ms of pure Python, calibrated once here so every scenario
  does the same work): throughput with --processes 1 vs 2, alternated ``--pairs``
  times (median ratio; target >= 1.85x on 2 cores);
* no-op handler: throughput and supervisor CPU per task, process mode vs
  --processes 0 (target: process mode >= 2,000 tasks/s);
* peak RSS (VmHWM) per child process.

Each scenario enqueues N tasks (EnqueueBatch) first, then starts a real
``conveyor worker`` subprocess and times from "session established" to the
moment the server counts all N completed. Supervisor CPU is the worker
process's own utime+stime from /proc (children are separate processes).

    .venv/bin/python bench/runtime_bench.py [--quick] [--baseline REV [--repeats 3]]
    .venv/bin/python bench/runtime_bench.py --cpu-slots default,2,4 [--repeats 3]

``--baseline REV`` instead compares this tree's worker with the worker of git revision REV
(``conveyor_sdk`` and ``cli`` extracted with ``git archive``; the server is this tree's), on
the no-op scenarios only (the supervisor's per-job cost), alternating the two trees
``--repeats`` times, and prints each side's medians and the ratio: on a shared machine only
a ratio measured in one run means something. Both sides run at their defaults (no
``--concurrency``: issue 32 asks for speed at the defaults); CPU per task is given for the
supervisor and for its children (together), so a cost moved from one to the other shows.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_sdk.client import SyncClient, TaskSpec  # noqa: E402
from conveyor_sdk.types import TaskState  # noqa: E402
from conveyor_server_min.testing import ServerProcess  # noqa: E402

APP = """
import os
from conveyor_sdk._worker.registry import Registry

app = Registry()

def _work(rounds):
    x = 0
    for i in range(rounds):
        x = (x * 31 + i) % 1000003
    return x

ROUNDS = int(os.environ["BENCH_ROUNDS"])  # calibrated once by the bench: the same work in every scenario

@app.handler("cpu")
def cpu(task, ctx):
    _work(ROUNDS)

@app.handler("noop")
async def noop(task, ctx):
    return None
"""


def _work(rounds: int) -> int:
    x = 0
    for i in range(rounds):
        x = (x * 31 + i) % 1000003
    return x


def calibrate(seconds: float = 0.005) -> int:
    """Rounds of ``_work`` taking ``seconds`` here (best of 5, so load spikes do not shrink the work)."""
    rounds = 1000
    while True:
        t0 = time.perf_counter()
        _work(rounds)
        if time.perf_counter() - t0 > 0.02:
            break
        rounds *= 2
    best = min(_timed(rounds) for _ in range(5))
    return int(rounds * seconds / best)


def _timed(rounds: int) -> float:
    t0 = time.perf_counter()
    _work(rounds)
    return time.perf_counter() - t0


CLK = os.sysconf("SC_CLK_TCK")
ENV = dict(os.environ)
_RUNS = itertools.count(1)


@dataclass
class Result:
    name: str
    tasks: int
    seconds: float
    sup_cpu: float
    child_rss_mib: list[float]
    child_cores: float = 0.0  # CPU the children got, in cores (sum of their CPU time / wall time)
    child_fed: list[float] = field(default_factory=list)  # per child: share of wall time running or runnable

    @property
    def child_cpu_per_task_us(self) -> float:
        return self.child_cores * self.seconds / self.tasks * 1e6

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds

    @property
    def cpu_per_task_us(self) -> float:
        return self.sup_cpu / self.tasks * 1e6


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def _sched(pid: int) -> tuple[float, float]:
    """(CPU seconds, seconds runnable but waiting for a CPU) over all threads, from schedstat."""
    cpu = wait = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                run_ns, wait_ns, _ = fh.read().split()
            cpu, wait = cpu + int(run_ns), wait + int(wait_ns)
    except OSError:
        pass
    return cpu / 1e9, wait / 1e9


def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            if ppid == pid:
                out.append(int(name))
    return out


def _hwm_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _is_child(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"conveyor_sdk._runtime.child" in fh.read()
    except OSError:
        return False


def _completed(client: SyncClient, queue: str) -> int:
    for info in client.admin.list_queues():
        if info.name == queue:
            return info.counts.get(TaskState.COMPLETED, 0)
    return 0


def _enqueue(client: SyncClient, type_: str, queue: str, n: int) -> None:
    for start in range(0, n, 1000):
        batch = [TaskSpec(type_, b"", queue=queue, retention=3600) for _ in range(min(1000, n - start))]
        client.enqueue_batch(batch)


def baseline_tree(rev: str) -> str:
    """``conveyor_sdk`` and ``conveyor_cli`` at ``rev`` in a new temporary directory (for PYTHONPATH)."""
    tmp = tempfile.mkdtemp(prefix="runtime-bench-")
    archive = subprocess.run(
        ["git", "archive", rev, "conveyor_sdk", "cli"], cwd=ROOT, check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
    os.rename(f"{tmp}/cli", f"{tmp}/conveyor_cli")
    where = subprocess.run(
        [sys.executable, "-c", "import conveyor_sdk, conveyor_cli; print(conveyor_sdk.__file__)"],
        env={**ENV, "PYTHONPATH": tmp}, cwd=tmp, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert where.startswith(tmp), f"the baseline would import {where.strip()}, not {tmp}"
    return tmp


def scenario(
    server: ServerProcess, folder: Path, name: str, type_: str, n: int, *args: str, env: dict[str, str] = ENV
) -> Result:
    queue = f"q{next(_RUNS)}"  # a fresh queue per run: its COMPLETED count starts at 0
    with SyncClient(server.url) as client:
        _enqueue(client, type_, queue, n)
        cmd = [sys.executable, "-m", "conveyor_cli", "worker", "bench_app:app", "--server", server.url,
               "-q", f"{queue}=1", "--log-format", "json", *args]  # fmt: skip
        proc = subprocess.Popen(
            cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            if "established" in line:
                break
        # Keep reading: one log line per task would otherwise fill the pipe and stall the worker.
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        t0 = time.perf_counter()
        cpu0 = _cpu_seconds(proc.pid)
        kids = [pid for pid in _children(proc.pid) if _is_child(pid)]
        sched0 = {pid: _sched(pid) for pid in kids}
        rss: dict[int, float] = {}
        while _completed(client, queue) < n:
            if proc.poll() is not None:
                raise RuntimeError(f"{name}: the worker exited ({proc.returncode})")
            for pid in kids:
                rss[pid] = max(rss.get(pid, 0.0), _hwm_mib(pid))
            time.sleep(0.05)
        seconds = time.perf_counter() - t0
        sup_cpu = _cpu_seconds(proc.pid) - cpu0
        deltas = [tuple(b - a for a, b in zip(sched0[pid], _sched(pid), strict=True)) for pid in kids]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    cores = sum(d[0] for d in deltas) / seconds
    fed = sorted((d[0] + d[1]) / seconds for d in deltas)
    return Result(name, n, seconds, sup_cpu, sorted(rss.values()), cores, fed)


def compare(rev: str, repeats: int, n: int) -> None:
    """The no-op scenarios, this tree's worker vs REV's, alternated; medians and ratios."""
    base_env = {**ENV, "PYTHONPATH": baseline_tree(rev)}
    here_env = {**ENV, "PYTHONPATH": str(ROOT)}
    modes = {"--processes 2": ("--processes", "2"), "--processes 0": ("--processes", "0")}
    runs: dict[tuple[str, str], list[Result]] = {}
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(["--lease-ttl", "60s"]) as server:
        folder = Path(tmp)
        (folder / "bench_app.py").write_text(APP)
        for i in range(repeats):
            sides = [("this tree", here_env), (rev, base_env)]
            for side, env in sides if i % 2 == 0 else sides[::-1]:  # alternate which side goes first
                for mode, args in modes.items():
                    r = scenario(server, folder, mode, "noop", n, *args, env=env)
                    runs.setdefault((mode, side), []).append(r)
                    print(
                        f"  {side:<12}{mode:<16}{r.rate:>8.0f} tasks/s {r.cpu_per_task_us:>6.0f} us/task"
                        f" (children {r.child_cpu_per_task_us:.0f} us)"
                    )
    print(f"\nno-op at the defaults, {n} tasks, {repeats} runs each; medians (ratio = this tree / {rev})")
    print(f"{'scenario':<16}{'side':<14}{'tasks/s':>9}{'sup CPU/task':>15}{'children CPU/task':>20}")
    for mode in modes:
        med = {}
        for side in ("this tree", rev):
            rs = runs[(mode, side)]
            med[side] = (
                statistics.median(r.rate for r in rs),
                statistics.median(r.cpu_per_task_us for r in rs),
                statistics.median(r.child_cpu_per_task_us for r in rs),
            )
            print(f"{mode:<16}{side:<14}{med[side][0]:>9.0f}{med[side][1]:>12.1f} us{med[side][2]:>17.1f} us")
        (rate, cpu, kids), (base_rate, base_cpu, base_kids) = med["this tree"], med[rev]
        kid_ratio = f"{kids / base_kids:>20.2f}" if base_kids else f"{'-':>20}"
        print(f"{mode:<16}{'ratio':<14}{rate / base_rate:>9.2f}{cpu / base_cpu:>15.2f}{kid_ratio}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def cpu_slots(values: list[str], repeats: int, n: int) -> None:
    """5 ms CPU-bound tasks on 2 processes at each ``--concurrency`` value (``default``: none given),
    interleaved: where the machine's CPU went (children, supervisor, server) and how fed the children were."""
    runs: dict[str, list[tuple[float, float, float, float, float]]] = {v: [] for v in values}
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(["--lease-ttl", "60s"]) as server:
        folder = Path(tmp)
        (folder / "bench_app.py").write_text(APP)
        assert server.proc is not None
        for i in range(repeats):
            for value in values if i % 2 == 0 else values[::-1]:
                extra = () if value == "default" else ("--concurrency", value)
                cpu0 = _cpu_seconds(server.proc.pid)
                r = scenario(server, folder, value, "cpu", n, "--processes", "2", *extra)
                srv = (_cpu_seconds(server.proc.pid) - cpu0) / r.seconds
                row = (r.rate, r.child_cores, sum(r.child_fed), r.sup_cpu / r.seconds, srv)
                runs[value].append(row)
                print(f"  --concurrency {value:<8}{row[0]:>6.0f} tasks/s  children {row[1]:.2f} cores, fed "
                      f"{row[2] * 100:.0f}%  supervisor {row[3]:.2f}  server {row[4]:.2f} cores")  # fmt: skip
    print(f"\n5 ms CPU tasks, --processes 2, {n} tasks, {repeats} runs each; medians")
    head = f"{'--concurrency':<15}{'tasks/s':>8}{'children cores':>16}{'fed (sum)':>11}"
    print(f"{head}{'sup cores':>11}{'server':>8}")
    for value, rows in runs.items():
        med = [statistics.median(r[k] for r in rows) for k in range(5)]
        print(f"{value:<15}{med[0]:>8.0f}{med[1]:>16.2f}{med[2] * 100:>10.0f}%{med[3]:>11.2f}{med[4]:>8.2f}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer tasks")
    parser.add_argument("--pairs", type=int, default=3, help="alternating CPU-bound 1-/2-process runs")
    parser.add_argument("--baseline", metavar="REV", help="compare the no-op scenarios with REV's worker")
    parser.add_argument("--repeats", type=int, default=3, help="runs per side with --baseline")
    parser.add_argument(
        "--cpu-slots",
        metavar="LIST",
        help="only the CPU-bound scenario on 2 processes at these --concurrency values, e.g. default,2,4",
    )
    opts = parser.parse_args()
    cpu_n, noop_n = (200, 2000) if opts.quick else (600, 8000)
    ENV["BENCH_ROUNDS"] = str(calibrate())
    if opts.cpu_slots:
        cpu_slots(opts.cpu_slots.split(","), max(1, opts.repeats), cpu_n)
        return
    if opts.baseline:
        compare(opts.baseline, max(1, opts.repeats), noop_n)
        return
    print(f"CPU task: {ENV['BENCH_ROUNDS']} rounds (~5 ms on one idle core); load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(["--lease-ttl", "60s"]) as server:
        folder = Path(tmp)
        (folder / "bench_app.py").write_text(APP)
        pairs = []
        for _ in range(max(1, opts.pairs)):  # alternate, so a load swing hits both sides of a pair alike
            one = scenario(server, folder, "cpu 5ms, --processes 1", "cpu", cpu_n, "--processes", "1")
            two = scenario(server, folder, "cpu 5ms, --processes 2", "cpu", cpu_n, "--processes", "2")
            pairs.append((one, two))
        noop = ("--concurrency", "64")
        noop0 = scenario(server, folder, "no-op, --processes 0", "noop", noop_n, "--processes", "0", *noop)
        noop2 = scenario(server, folder, "no-op, --processes 2", "noop", noop_n, "--processes", "2", *noop)
    head = f"{'scenario':<28}{'tasks':>7}{'tasks/s':>10}{'sup CPU/task':>15}{'child peak RSS MiB':>22}"
    print(f"{head}{'child cores':>13}{'child fed %':>14}")
    for r in [*(r for pair in pairs for r in pair), noop0, noop2]:
        rss = ", ".join(f"{v:.0f}" for v in r.child_rss_mib) or "-"
        fed = ", ".join(f"{v * 100:.0f}" for v in r.child_fed) or "-"
        line = f"{r.name:<28}{r.tasks:>7}{r.rate:>10.0f}{r.cpu_per_task_us:>12.0f} us{rss:>22}"
        print(f"{line}{r.child_cores:>13.2f}{fed:>14}")
    ratios = [two.rate / one.rate for one, two in pairs]
    print(
        f"\nCPU-bound speed-up, 2 processes vs 1: median {statistics.median(ratios):.2f}x of "
        f"{', '.join(f'{r:.2f}x' for r in ratios)} (target >= 1.85x)"
    )
    per_core = [
        (two.rate / two.child_cores) / (one.rate / one.child_cores)
        for one, two in pairs
        if one.child_cores and two.child_cores
    ]
    if per_core:
        print(
            f"tasks per child CPU-second, 2 processes vs 1: median {statistics.median(per_core):.2f} "
            "(1.00 = the runtime wastes no child CPU when going from 1 to 2 processes)"
        )
    print(
        "child fed % = time each child's threads were running or waiting for a CPU, over the wall time "
        "(above 100 when two of its threads were runnable at once); well under 100 means the child sat "
        "idle for lack of work, i.e. the runtime, not the machine, held it back"
    )
    print(f"no-op, process mode: {noop2.rate:.0f} tasks/s (target >= 2000); in-process: {noop0.rate:.0f}/s")
    print(
        f"supervisor CPU per no-op task: {noop2.cpu_per_task_us:.0f} us (process mode) vs "
        f"{noop0.cpu_per_task_us:.0f} us (in-process, includes running the handlers)"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
