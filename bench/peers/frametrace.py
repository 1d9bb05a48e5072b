"""Frame traces of our workers and conveyorq against one server (conveyord, or ours).

Each worker gets a fresh queue with N no-op tasks enqueued before it starts, and connects
through a counting relay (``_h2trace``); after the backlog, ``--idle`` tasks are sent one at a
time to the idle worker. Printed per task: the session messages each way by kind, HTTP/2
frames by type, the relay's reads (about the sender's socket writes), bytes, and how many
gRPC messages shared a DATA frame. Counts do not depend on the machine's load the way
timings do, though batching still depends on timing.

    .venv/bin/python bench/peers/frametrace.py --server http://127.0.0.1:29910 [--pid PID] [--tasks 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "apps"), str(HERE.parents[1])]

from _h2trace import Direction, Relay  # noqa: E402
from _procs import cpu_seconds, stop  # noqa: E402
from _systems import APPS, CONVEYORD, PYTHONPATH, System  # noqa: E402

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb  # noqa: E402
from conveyor_sdk.client import SyncClient, TaskSpec  # noqa: E402

WORKERS = {"conveyor worker": CONVEYORD[0], "in-process Worker": CONVEYORD[1], "conveyorq": CONVEYORD[2]}


def _diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in after.items():
        out[key] = value - before[key]  # numbers and Counters alike
    return out


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


async def trace(system: System, server: str, pid: int, n: int, idle: int) -> dict[str, Any]:
    up, down = Direction(pb.WorkerMessage.FromString, preface=True), Direction(pb.ServerMessage.FromString)
    target = urlsplit(server)
    relay = Relay((target.hostname or "127.0.0.1", target.port or 80), up, down)
    port = await relay.start()
    queue = f"trace{os.getpid()}x{time.monotonic_ns() % 10**9}"
    with tempfile.TemporaryDirectory(prefix="trace-") as tmp, SyncClient(server) as client:
        out = Path(tmp)
        for start in range(0, n, 1000):
            client.enqueue_batch([TaskSpec("noop", b"", queue=queue) for _ in range(min(1000, n - start))])
        env = {**os.environ, "PEERS_OUT": tmp, "PEERS_QUEUE": queue, "PYTHONPATH": PYTHONPATH}
        cmd = system.command(f"http://127.0.0.1:{port}", queue, "noop")
        proc = subprocess.Popen(  # noqa: ASYNC220 - started once, before the measured phase
            cmd,
            cwd=APPS,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            cpu0, t0 = cpu_seconds(pid) if pid else 0.0, time.monotonic()
            while _size(out / "noop") < n:
                if proc.poll() is not None or time.monotonic() - t0 > 600:
                    raise RuntimeError(f"{system.name}: {_size(out / 'noop')} of {n} tasks")
                await asyncio.sleep(0.01)
            server_cpu = (cpu_seconds(pid) - cpu0) if pid else 0.0
            await asyncio.sleep(1.0)  # let the last Results and a heartbeat through
            busy = (up.snapshot(), down.snapshot())
            for i in range(idle):
                client.enqueue("lat", repr(time.time()).encode(), queue=queue)
                while _lines(out / "lat") <= i:  # noqa: ASYNC110 - a file written by another process
                    await asyncio.sleep(0.002)
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            quiet = (_diff(up.snapshot(), busy[0]), _diff(down.snapshot(), busy[1]))
        finally:
            stop(proc)
            await relay.close()
    return {"busy": busy, "idle": quiet, "server_cpu_us": server_cpu / n * 1e6}


def _row(label: str, value: float) -> str:
    return f"  {label:<44}{value:>10.2f}"


def report(name: str, phase: str, tasks: int, sides: tuple[dict[str, Any], dict[str, Any]]) -> list[str]:
    lines = [f"{name}, {phase} ({tasks} tasks), per task:"]
    for side, counts in zip(("worker->server", "server->worker"), sides, strict=True):
        for kind, count in sorted(counts["messages"].items()):
            size = counts["message_bytes"][kind] / count if count else 0
            lines.append(_row(f"{side} {kind} messages (avg {size:.0f} B)", count / tasks))
        for kind, count in sorted(counts["frames"].items()):
            lines.append(_row(f"{side} HTTP/2 {kind} frames", count / tasks))
        lines.append(_row(f"{side} socket reads at the relay", counts["reads"] / tasks))
        lines.append(_row(f"{side} bytes", counts["bytes"] / tasks))
        per_data = counts["messages_in_data"] / max(1, counts["data_frames_with_messages"])
        lines.append(f"  {side} gRPC messages per DATA frame (avg): {per_data:.2f}")
    up = sides[0]
    lines.append(_row("heartbeat ids listed", up["heartbeat_ids"] / tasks))
    lines.append(_row("credits granted", up["credits"] / tasks))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--pid", type=int, default=0, help="the server's pid, for its CPU per task")
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--idle", type=int, default=50)
    parser.add_argument("--workers", default=",".join(WORKERS))
    opts = parser.parse_args()
    for name in opts.workers.split(","):
        system = WORKERS[name]
        if system.missing():
            print(f"skipped {name}: {system.missing()}")
            continue
        result = asyncio.run(trace(system, opts.server, opts.pid, opts.tasks, opts.idle))
        print("\n".join(report(name, "backlog", opts.tasks, result["busy"])))
        print("\n".join(report(name, "idle, one task at a time", opts.idle, result["idle"])))
        if opts.pid:
            cpu = result["server_cpu_us"]
            print(f"  server CPU per task over the backlog (through the relay): {cpu:,.0f} us")
        print(flush=True)


if __name__ == "__main__":
    main()
