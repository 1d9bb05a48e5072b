"""``conveyor worker`` at its defaults, this tree against a base checkout: no-op tasks, interleaved pairs.

Per side and run: N no-op tasks are enqueued, then a ``conveyor worker`` (defaults, task log on,
the base side's code through ``PYTHONPATH``) runs them against one reference server. Counted
from the session's "established" line to the last completion, per task:

* CPU of the supervisor and of its children together (utime + stime from /proc);
* read and write system calls (``syscr`` / ``syscw`` from /proc/PID/io);
* voluntary and involuntary context switches (/proc/PID/status).

Rates on a shared machine are noise; the per-task counts are what load cannot move much. The
sides alternate which goes first; medians over ``--pairs`` and their ratios (this / base) are printed.

    .venv/bin/python bench/runtime_ab.py --base /work/base-NAME [--tasks 8000] [--pairs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench" / "peers"))

from _procs import tree  # noqa: E402

from conveyor_sdk.client import SyncClient, TaskSpec  # noqa: E402
from conveyor_sdk.types import TaskState  # noqa: E402
from conveyor_server_min.testing import ServerProcess  # noqa: E402

APP = """
from conveyor_sdk._worker.registry import Registry

app = Registry()

@app.handler("noop")
async def noop(task, ctx):
    return None
"""
CLK = os.sysconf("SC_CLK_TCK")
KEYS = ("cpu", "syscr", "syscw", "vcs", "nvcs")


def _completed(client: SyncClient, queue: str) -> int:
    for info in client.admin.list_queues():
        if info.name == queue:
            return info.counts.get(TaskState.COMPLETED, 0)
    return 0


def _snap(pid: int) -> dict[str, float]:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    out = {"cpu": (int(fields[11]) + int(fields[12])) / CLK}
    with open(f"/proc/{pid}/io") as fh:
        for line in fh:
            key, value = line.split(":")
            out[key] = int(value)
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("voluntary_ctxt_switches"):
                out["vcs"] = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                out["nvcs"] = int(line.split()[1])
    return out


def _children(pid: int) -> list[int]:
    """The runtime's children: processes under ``pid`` that run ``_runtime.child``."""
    out = []
    for kid in tree(pid)[1:]:
        try:
            with open(f"/proc/{kid}/cmdline", "rb") as fh:
                if b"_runtime.child" in fh.read():
                    out.append(kid)
        except OSError:
            continue
    return out


def run_once(server: ServerProcess, folder: str, code: str, n: int) -> dict[str, float]:
    """One ``conveyor worker`` run of ``code``'s tree over ``n`` fresh no-op tasks; per-task figures."""
    queue = f"ab{time.monotonic_ns()}"
    with SyncClient(server.url) as client:
        for start in range(0, n, 1000):
            specs = [TaskSpec("noop", b"", queue=queue, retention=3600) for _ in range(min(1000, n - start))]
            client.enqueue_batch(specs)
        cmd = [
            sys.executable,
            "-m",
            "conveyor_cli",
            "worker",
            "app:app",
            "--server",
            server.url,
            "-q",
            f"{queue}=1",
        ]
        env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{code}"}
        proc = subprocess.Popen(
            cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            if "established" in line:
                break
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # the task log must not fill the pipe
        kids = _children(proc.pid)
        sup0, kids0 = _snap(proc.pid), [_snap(k) for k in kids]
        t0, done0 = time.perf_counter(), _completed(client, queue)
        while _completed(client, queue) < n:
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
        sup1, kids1 = _snap(proc.pid), [_snap(k) for k in kids]
        proc.terminate()
        proc.wait(30)
    done = n - done0
    row = {"tasks/s": done / seconds}
    for key in KEYS:
        row[f"sup {key}"] = (sup1[key] - sup0[key]) / done
        row[f"kids {key}"] = sum(b[key] - a[key] for a, b in zip(kids0, kids1, strict=True)) / done
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--base", required=True, help="a checkout of the base revision (its conveyor_sdk and cli)"
    )
    ap.add_argument("--tasks", type=int, default=8000)
    ap.add_argument("--pairs", type=int, default=7)
    opts = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"this": [], "base": []}
    with tempfile.TemporaryDirectory() as folder, ServerProcess(["--lease-ttl", "60s"]) as server:
        Path(folder, "app.py").write_text(APP)
        for i in range(opts.pairs):
            sides = [("this", str(ROOT)), ("base", opts.base)]
            for side, code in sides if i % 2 == 0 else sides[::-1]:
                row = run_once(server, folder, code, opts.tasks)
                runs[side].append(row)
                cpu = f"sup {row['sup cpu'] * 1e6:.0f} us, children {row['kids cpu'] * 1e6:.0f} us"
                print(
                    f"  {side:<5}{row['tasks/s']:>8.0f} tasks/s  {cpu}  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    print(f"\nmedians of {opts.pairs} interleaved pairs, {opts.tasks} tasks per run; per task (CPU in us)")
    for key in runs["this"][0]:
        this = statistics.median(r[key] for r in runs["this"])
        base = statistics.median(r[key] for r in runs["base"])
        scale = 1e6 if key.endswith("cpu") else 1
        ratio = f"{this / base:.2f}" if base else "-"
        print(f"  {key:<12} this {this * scale:>10.3f}  base {base * scale:>10.3f}  ratio {ratio}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
