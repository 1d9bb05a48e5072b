"""Dashboard benchmark: page render time with 10,000 tasks in a queue, and server CPU under 10 pollers.

Run:  .venv/bin/python bench/dashboard_bench.py [--tasks 10000] [--samples 200] [--seconds 15] [--tabs 10]
            [--baseline REV]

Starts ``python -m conveyor_server_min --dev`` and ``conveyor dashboard`` on free ports, fills one
queue with ``--tasks`` pending tasks (EnqueueBatch), then measures:

* **render time**, server side: the dashboard's ``Server-Timing: page;dur=`` header (admin RPCs to
  the server + template rendering, excluding the browser leg) for the overview and the first queue
  page (50 tasks), the full page and the live fragment the browser polls; p50 and p99 over
  ``--samples`` sequential requests.
* **added CPU**: CPU seconds per wall second of the reference server process and of the dashboard
  process (``/proc/PID/stat`` utime+stime), first with no browser open, then while ``--tabs``
  simulated tabs poll the overview fragment every 1.5 s exactly as ``dashboard.js`` does (one
  HTTP GET with ``X-Dashboard-Live: 1`` per tick each; the dashboard's single WatchEvents stream is
  open in both windows).

``--baseline REV`` (a git revision, e.g. ``HEAD`` or ``HEAD~3``) also starts a second dashboard from
``cli/`` as it was at REV (extracted with ``git archive``; the SDK is today's) against the same
server, takes each row's samples from the two dashboards in alternating blocks of 10, and prints
the baseline's figures and the ratio beside today's: on a shared machine only a ratio measured in
one run means something.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from conveyor_sdk.client import SyncClient, task
from conveyor_server_min.testing import ServerProcess

TICK = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parent.parent
BLOCK = 10  # samples taken from one dashboard before switching to the other


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def baseline_tree(rev: str) -> str:
    """``cli/`` at ``rev`` as an importable ``conveyor_cli`` package in a new temporary directory."""
    tmp = tempfile.mkdtemp(prefix="dashboard-bench-")
    archive = subprocess.run(["git", "archive", rev, "cli"], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
    os.rename(f"{tmp}/cli", f"{tmp}/conveyor_cli")
    env = {**os.environ, "PYTHONPATH": tmp}
    where = subprocess.run(
        [sys.executable, "-c", "import conveyor_cli; print(conveyor_cli.__file__)"],
        env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert where.startswith(tmp), f"the baseline would import {where.strip()}, not {tmp}"
    return tmp


def start_dashboard(server: str, pythonpath: str | None = None) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "conveyor_cli", "dashboard", "--server", server, "--port", "0"]
    env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    match = re.search(r"dashboard on (\S+?)/? for", proc.stdout.readline())
    assert match, "dashboard did not start"
    return proc, match.group(1)


def fill(server: str, queue: str, n: int) -> None:
    with SyncClient(server, timeout=60) as client:
        for start in range(0, n, 1000):
            specs = [task("bench.item", {"n": i}, queue=queue) for i in range(start, min(n, start + 1000))]
            client.enqueue_batch(specs)


def render_times(bases: list[str], path: str, samples: int, live: bool) -> list[tuple[float, float]]:
    """(p50, p99) per dashboard in ``bases``, their samples taken in alternating blocks."""
    headers = {"X-Dashboard-Live": "1"} if live else {}
    durations: list[list[float]] = [[] for _ in bases]
    with httpx.Client(timeout=30) as http:
        while len(durations[0]) < samples:
            for base, out in zip(bases, durations, strict=True):
                for _ in range(min(BLOCK, samples - len(out))):
                    resp = http.get(base + path, headers=headers)
                    assert resp.status_code == 200, resp.status_code
                    out.append(float(resp.headers["server-timing"].split("dur=")[1]))
    return [percentiles(d) for d in durations]


def percentiles(durations: list[float]) -> tuple[float, float]:
    durations = sorted(durations)
    return statistics.median(durations), durations[min(len(durations) - 1, int(len(durations) * 0.99))]


def cpu_rate(pids: list[int], seconds: float) -> list[float]:
    before = [cpu_seconds(p) for p in pids]
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    return [(cpu_seconds(p) - b) / wall for p, b in zip(pids, before, strict=True)]


def poll_tabs(base: str, tabs: int, stop: threading.Event) -> list[int]:
    counts = [0] * tabs

    def tab(i: int) -> None:
        with httpx.Client(timeout=30) as http:
            next_at = time.monotonic() + i * 1.5 / tabs  # tabs opened at different moments
            while not stop.is_set():
                stop.wait(max(0.0, next_at - time.monotonic()))
                if stop.is_set():
                    break
                http.get(base + "/", headers={"X-Dashboard-Live": "1"})
                counts[i] += 1
                next_at += 1.5

    threads = [threading.Thread(target=tab, args=(i,), daemon=True) for i in range(tabs)]
    for t in threads:
        t.start()
    stop.threads = threads  # type: ignore[attr-defined]
    return counts


ROWS = [
    ("overview (full page)", "/", False),
    ("overview (live fragment)", "/", True),
    ("queue page (full page)", "/queues/bench", False),
    ("queue page (live fragment)", "/queues/bench", True),
    ("queue, type filter", "/queues/bench?type=nomatch", True),
]


def print_render(bases: list[str], samples: int) -> None:
    head = f"{'page':<28}{'p50 ms':>10}{'p99 ms':>10}"
    print(head + (f"{'base p50':>10}{'base p99':>10}{'p50 ratio':>11}" if len(bases) > 1 else ""))
    for label, path, live in ROWS:
        n = samples if "filter" not in label else max(10, samples // 10)
        rows = render_times(bases, path, n, live)
        line = f"{label:<28}{rows[0][0]:>10.2f}{rows[0][1]:>10.2f}"
        if len(rows) > 1:
            line += f"{rows[1][0]:>10.2f}{rows[1][1]:>10.2f}{rows[0][0] / rows[1][0]:>11.2f}"
        print(line)


def print_cpu(server_pid: int, dashboards: list[tuple[str, int, str]], seconds: float, tabs: int) -> None:
    """CPU of the server and of each dashboard with no tab open, then while ``tabs`` poll it."""
    for name, pid, base in dashboards:
        pids = [server_pid, pid]
        idle = cpu_rate(pids, seconds)
        stop = threading.Event()
        counts = poll_tabs(base, tabs, stop)
        busy = cpu_rate(pids, seconds)
        stop.set()
        for t in stop.threads:  # type: ignore[attr-defined]
            t.join(10)
        print(f"\nCPU (cores busy) of {name}, {seconds:.0f} s windows, {tabs} tabs polling every 1.5 s "
              f"({sum(counts)} polls):")  # fmt: skip
        print(f"{'process':<20}{'no tabs':>10}{f'{tabs} tabs':>10}{'added':>10}")
        for proc, a, b in zip(("reference server", "dashboard"), idle, busy, strict=True):
            print(f"{proc:<20}{a:>10.3f}{b:>10.3f}{b - a:>10.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--tabs", type=int, default=10)
    parser.add_argument("--baseline", metavar="REV", help="also measure cli/ at this git revision")
    args = parser.parse_args()

    server = ServerProcess()
    server.start()
    assert server.proc is not None
    procs: list[subprocess.Popen[str]] = []
    try:
        dash, base = start_dashboard(server.url)
        procs.append(dash)
        dashboards = [("this tree", dash.pid, base)]
        if args.baseline:
            old, old_base = start_dashboard(server.url, baseline_tree(args.baseline))
            procs.append(old)
            dashboards.append((f"baseline {args.baseline}", old.pid, old_base))
        fill(server.url, "bench", args.tasks)
        print(f"{args.tasks} pending tasks in queue 'bench'; {args.samples} samples per row"
              + (f"; baseline = cli/ at {args.baseline}" if args.baseline else ""))  # fmt: skip
        print_render([b for _, _, b in dashboards], args.samples)
        print_cpu(server.proc.pid, dashboards, args.seconds, args.tabs)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        server.stop()


if __name__ == "__main__":
    main()
