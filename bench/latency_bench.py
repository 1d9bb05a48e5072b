"""Enqueue-to-handler-start latency: our Worker, our runtime, a grpc.aio baseline, conveyorq.

One fresh reference server (dev mode) serves every worker in the run. Each worker runs in
its own process on its own queue. The producer (this process, our async Client) sends one
unary Enqueue every ``--gap`` ms and records ``time.monotonic_ns()`` just before each call;
the handler's first line records the same clock (see ``bench/_latency_workers.py``).
Latency = handler start - send.

By default every worker of a round is connected at once and the producer takes their queues
in turn, task by task (in a new random order every lap), so each row is measured over the same
seconds of the same machine: a shared 2-vCPU VM changes speed from minute to minute (the
floor moved 0.69 -> 0.93 ms between back-to-back runs), which made rows measured one after
the other disagree by more than the differences under study. Only one task is ever in
flight, so every queue is still idle when its task arrives. ``--sequential`` measures the
workers one after the other instead (one process at a time), as earlier versions did.

Rows: ``ours`` is our Worker as ``asyncio.run(worker.run(...))``; ``ours-uvloop`` is the same
Worker through ``worker.run_sync(...)`` on uvloop; ``runtime`` is ``conveyor worker --processes 1``
on its default loop (uvloop), ``runtime-asyncio`` the same with ``--loop asyncio`` (not run unless
named in ``--kinds``). The server runs on ``--server-loop`` (default ``auto``: uvloop).

The upstream ``conveyorq`` SDK is measured when ``--conveyorq-python`` names an interpreter
that has it installed (or this one does); otherwise that row is skipped with a note.

The ``floor`` row is our Worker stamped when the Dispatch's bytes reach Python (the session
socket's ``data_received``), not when the handler starts: the part of the latency that no
worker written on asyncio can remove (producer, server, kernel wake-up, the loop's read).
Each worker's "above floor" figure is what it spends after that. ``floor / conveyorq`` is
the best ratio any worker on asyncio's loop could reach against conveyorq with this producer and
server (a process on uvloop wakes into ``data_received`` sooner, so its own floor is lower).

``--pin`` puts the workers on the last CPU and this process (producer and server) on the
others, so a worker that wakes does not compete for a CPU with the producer it raced; the
comparison then shows the workers' own costs with less scheduler noise (Linux only).

Run:  .venv/bin/python bench/latency_bench.py [--tasks 200] [--gap-ms 20] [--rounds 3]
          [--conveyorq-python /path/to/venv/bin/python] [--kinds floor,ours,...] [--pin]
          [--sequential] [--server-loop auto|asyncio|uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_sdk.client import Client  # noqa: E402
from conveyor_server_min.testing import ServerProcess  # noqa: E402

WORKERS = ROOT / "bench" / "_latency_workers.py"


def command(kind: str, url: str, queue: str, conveyorq_python: str | None) -> list[str]:
    if kind in ("runtime", "runtime-asyncio"):
        conveyor = str(Path(sys.executable).with_name("conveyor"))
        loop = "asyncio" if kind == "runtime-asyncio" else "auto"
        return [conveyor, "worker", "bench._latency_workers:app", "--server", url,
                "-q", f"{queue}=1", "--processes", "1", "--loop", loop]  # fmt: skip
    python = conveyorq_python if kind == "conveyorq" and conveyorq_python else sys.executable
    return [python, str(WORKERS), kind, url, queue]


def read_lines(path: str) -> dict[int, int]:
    out: dict[int, int] = {}
    with open(path, "rb") as f:
        for line in f:
            seq, _, ns = line.strip().partition(b" ")
            if seq.isdigit():
                out[int(seq)] = int(ns)
    return out


async def wait_for(path: str, seq: int, within: float) -> None:
    end = time.monotonic() + within
    while seq not in read_lines(path):
        if time.monotonic() > end:
            raise TimeoutError(f"task {seq} never started (see {path})")
        await asyncio.sleep(0.01)


@dataclass
class Lane:
    """One worker process of a round: its kind, queue, stamp file and the latencies measured."""

    kind: str
    queue: str
    path: str
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    sent: dict[int, int] = field(default_factory=dict)


def start_lane(
    kind: str, url: str, tmp: str, conveyorq_python: str | None, worker_cpus: set[int] | None
) -> Lane:
    queue = f"lat-{kind}-{time.monotonic_ns()}"
    path = os.path.join(tmp, f"{kind}.txt")
    env = {**os.environ, "LAT_OUT": path, "PYTHONPATH": str(ROOT)}
    log = open(os.path.join(tmp, f"{kind}.log"), "wb")  # noqa: SIM115 — closed by stop_lane
    proc = subprocess.Popen(
        command(kind, url, queue, conveyorq_python), env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
    )
    if worker_cpus is not None:  # before its first task; the runtime's children inherit it
        os.sched_setaffinity(proc.pid, worker_cpus)
    return Lane(kind, queue, path, proc, log)


def stop_lane(lane: Lane) -> None:
    lane.log.close()
    lane.proc.terminate()
    try:
        lane.proc.wait(30)
    except subprocess.TimeoutExpired:
        lane.proc.kill()
        lane.proc.wait()


async def produce(url: str, lanes: list[Lane], n: int, gap: float) -> dict[str, list[float]]:
    """Send ``n`` tasks to every lane, one task every ``gap`` s, lanes taken in turn; latencies (ms)."""
    async with Client(url) as client:
        for lane in lanes:  # warm-up: each worker is connected once its first task ran
            await client.enqueue("lat", b"-1", queue=lane.queue, content_type="application/octet-stream")
            end = time.monotonic() + 60
            while not read_lines_or_empty(lane.path):
                if time.monotonic() > end:
                    raise TimeoutError(f"{lane.kind} never ran the warm-up task")
                await asyncio.sleep(0.02)
        order = list(lanes)
        shuffle = random.Random(0).shuffle
        for i in range(1, n + 1):
            shuffle(order)  # each lap in a new order: no worker always follows the same one
            for lane in order:
                t0 = time.monotonic_ns()
                lane.sent[i] = t0
                await client.enqueue(
                    "lat", str(i).encode(), queue=lane.queue, content_type="application/octet-stream"
                )
                await asyncio.sleep(max(0.0, gap - (time.monotonic_ns() - t0) / 1e9))
        for lane in lanes:
            await wait_for(lane.path, n, 30)
    out: dict[str, list[float]] = {}
    for lane in lanes:
        started = read_lines(lane.path)
        out[lane.kind] = [(started[i] - lane.sent[i]) / 1e6 for i in range(1, n + 1)]
    return out


def read_lines_or_empty(path: str) -> bool:
    """True once the worker wrote anything (the warm-up task ran)."""
    return os.path.exists(path) and os.path.getsize(path) > 0


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def pin_cpus() -> tuple[set[int], set[int]] | None:
    """(producer and server CPUs, worker CPUs) for ``--pin``; None where it cannot be done."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return set(cpus[:-1]), {cpus[-1]}


def measure(
    kinds: list[str],
    url: str,
    n: int,
    gap: float,
    conveyorq_python: str | None,
    *,
    worker_cpus: set[int] | None = None,
) -> dict[str, dict[str, float]]:
    """One round: the workers of ``kinds`` connected at once, their tasks interleaved."""
    with tempfile.TemporaryDirectory() as tmp:
        lanes: list[Lane] = []
        try:
            for kind in kinds:
                lanes.append(start_lane(kind, url, tmp, conveyorq_python, worker_cpus))
            lat = asyncio.run(produce(url, lanes, n, gap))
        except TimeoutError:
            for lane in lanes:
                lane.log.flush()
                tail = Path(lane.log.name).read_text(errors="replace")[-3000:]
                sys.stderr.write(f"--- {lane.kind}\n{tail}")
            raise
        finally:
            for lane in lanes:
                stop_lane(lane)
    return {k: {"p50": pct(v, 50), "p90": pct(v, 90), "p99": pct(v, 99)} for k, v in lat.items()}


def has_conveyorq(python: str | None) -> str | None:
    exe = python or sys.executable
    ok = subprocess.run([exe, "-c", "import conveyorq"], check=False, capture_output=True).returncode == 0
    return exe if ok else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conveyorq-python", default=None)
    ap.add_argument("--kinds", default="floor,ours,ours-uvloop,runtime,grpc,conveyorq")
    ap.add_argument("--server-loop", default="auto", help="the reference server's --loop (auto = uvloop)")
    ap.add_argument("--pin", action="store_true", help="workers on the last CPU, producer+server on the rest")
    ap.add_argument("--sequential", action="store_true", help="one worker at a time, not interleaved")
    args = ap.parse_args()
    pinned = pin_cpus() if args.pin else None
    if args.pin and pinned is None:
        print("--pin needs Linux and at least 2 CPUs: running unpinned")
    if pinned is not None:
        os.sched_setaffinity(0, pinned[0])  # the server process started below inherits it
    cq = has_conveyorq(args.conveyorq_python)
    kinds = [k for k in args.kinds.split(",") if k != "conveyorq" or cq]
    if "conveyorq" in args.kinds and not cq:
        print("conveyorq not installed (pass --conveyorq-python): row skipped")
    rows: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    pin_note = f"; workers pinned to CPU {sorted(pinned[1])}" if pinned else ""
    mode = "one worker at a time" if args.sequential else "workers interleaved"
    print(f"{args.tasks} tasks per worker, one task every {args.gap_ms:g} ms, {args.rounds} rounds, {mode}"
          f"{pin_note}; server loop {args.server_loop}; ms")  # fmt: skip
    worker_cpus = pinned[1] if pinned else None
    with ServerProcess(["--dev", "--loop", args.server_loop]) as server:
        for r in range(args.rounds):
            groups = [[k] for k in kinds] if args.sequential else [kinds]
            for group in groups:
                got = measure(group, server.url, args.tasks, args.gap_ms / 1000, cq, worker_cpus=worker_cpus)
                for kind in group:
                    res = got[kind]
                    rows[kind].append(res)
                    print(f"  round {r + 1}: {kind:<15} p50 {res['p50']:.3f}  p90 {res['p90']:.3f}"
                          f"  p99 {res['p99']:.3f}", flush=True)  # fmt: skip
    print(f"{'worker':<17}{'p50':>9}{'p90':>9}{'p99':>9}   (median of rounds)")
    med = {k: {p: statistics.median(x[p] for x in v) for p in ("p50", "p90", "p99")} for k, v in rows.items()}
    floor = med.get("floor")
    for kind, m in med.items():
        above = "" if floor is None or kind == "floor" else f"   {m['p50'] - floor['p50']:.3f} above floor"
        print(f"{kind:<17}{m['p50']:>9.3f}{m['p90']:>9.3f}{m['p99']:>9.3f}{above}")
    base = "conveyorq" if "conveyorq" in med else "grpc" if "grpc" in med else None
    if base is not None:
        for kind in med:
            if kind != base:
                print(f"{kind} / {base}: p50 {med[kind]['p50'] / med[base]['p50']:.2f}"
                      f"  p99 {med[kind]['p99'] / med[base]['p99']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
