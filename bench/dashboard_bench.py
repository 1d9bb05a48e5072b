"""Dashboard benchmark: page render time with 10,000 tasks in a queue, and server CPU under 10 pollers.

Run:  .venv/bin/python bench/dashboard_bench.py [--tasks 10000] [--samples 200] [--seconds 15] [--tabs 10]

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
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import httpx

from conveyor_sdk.client import SyncClient, task
from conveyor_server_min.testing import ServerProcess

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def start_dashboard(server: str) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "conveyor_cli", "dashboard", "--server", server, "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    match = re.search(r"dashboard on (\S+?)/? for", proc.stdout.readline())
    assert match, "dashboard did not start"
    return proc, match.group(1)


def fill(server: str, queue: str, n: int) -> None:
    with SyncClient(server, timeout=60) as client:
        for start in range(0, n, 1000):
            specs = [task("bench.item", {"n": i}, queue=queue) for i in range(start, min(n, start + 1000))]
            client.enqueue_batch(specs)


def render_times(base: str, path: str, samples: int, live: bool) -> tuple[float, float]:
    headers = {"X-Dashboard-Live": "1"} if live else {}
    durations = []
    with httpx.Client(timeout=30) as http:
        for _ in range(samples):
            resp = http.get(base + path, headers=headers)
            assert resp.status_code == 200, resp.status_code
            durations.append(float(resp.headers["server-timing"].split("dur=")[1]))
    durations.sort()
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--tabs", type=int, default=10)
    args = parser.parse_args()

    server = ServerProcess()
    server.start()
    assert server.proc is not None
    dash, base = start_dashboard(server.url)
    try:
        fill(server.url, "bench", args.tasks)
        print(f"{args.tasks} pending tasks in queue 'bench'; {args.samples} samples per row")
        print(f"{'page':<28}{'p50 ms':>10}{'p99 ms':>10}")
        for label, path, live in [
            ("overview (full page)", "/", False),
            ("overview (live fragment)", "/", True),
            ("queue page (full page)", "/queues/bench", False),
            ("queue page (live fragment)", "/queues/bench", True),
            ("queue, type filter", "/queues/bench?type=nomatch", True),
        ]:
            samples = args.samples if "filter" not in label else max(10, args.samples // 10)
            p50, p99 = render_times(base, path, samples, live)
            print(f"{label:<28}{p50:>10.2f}{p99:>10.2f}")

        pids = [server.proc.pid, dash.pid]
        idle = cpu_rate(pids, args.seconds)
        stop = threading.Event()
        counts = poll_tabs(base, args.tabs, stop)
        busy = cpu_rate(pids, args.seconds)
        stop.set()
        for t in stop.threads:  # type: ignore[attr-defined]
            t.join(10)
        print(f"\nCPU (cores busy), {args.seconds:.0f} s windows, {args.tabs} tabs polling every 1.5 s "
              f"({sum(counts)} polls):")  # fmt: skip
        print(f"{'process':<20}{'no tabs':>10}{'10 tabs':>10}{'added':>10}")
        for name, a, b in zip(("reference server", "dashboard"), idle, busy, strict=True):
            print(f"{name:<20}{a:>10.3f}{b:>10.3f}{b - a:>10.3f}")
    finally:
        dash.terminate()
        dash.wait(10)
        server.stop()


if __name__ == "__main__":
    main()
