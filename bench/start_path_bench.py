"""Inside an idle Worker, from a Dispatch's bytes to its handler's first line: this tree vs another.

Two Worker processes (one per source tree) connect to one fresh reference server (dev mode,
this tree's). The producer (this process) sends one task every ``--gap-ms`` to each worker's
queue in turn, the order swapped every lap, so both workers see the same seconds of the machine
and each queue is idle when its task arrives. Each worker stamps ``time.perf_counter_ns()`` on
entry to ``SessionStream._on_data`` (what the session socket's ``data_received`` runs) and in
the handler's first line; the difference is the worker's own start path (HTTP/2, framing,
protobuf, session machine, the job's task, one loop turn, executor), without the producer,
the server or the kernel's wake-up. The first 10 tasks of each worker are dropped (warm-up).

``--other`` names the source tree to compare with (for example ``git worktree add /tmp/base
<commit>``); it must have ``conveyor_sdk/_transport/session.py`` with ``SessionStream._on_data``.
Without it both workers run this tree: the ratio then shows the noise of the measurement.

Run:  .venv/bin/python bench/start_path_bench.py [--other PATH] [--tasks 500] [--gap-ms 8]
          [--rounds 3] [--loop uvloop|asyncio]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 10


def worker_main(argv: list[str]) -> None:
    """One worker process (``URL QUEUE TREE OUT COUNT LOOP``): stamp every task, write the
    durations (ns) to OUT once COUNT tasks ran."""
    url, queue, tree, out, count_arg, loop = argv
    count = int(count_arg)
    sys.path.insert(0, tree)
    from _latency_workers import stamp_reads  # this tree's bench/, beside this script

    from conveyor_sdk._transport import session
    from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker

    read_ns = stamp_reads(session.SessionStream, time.perf_counter_ns)
    durations: list[int] = []
    reg = Registry()

    @reg.handler("start")
    async def start(task: TaskData, ctx: TaskContext) -> None:
        durations.append(time.perf_counter_ns() - read_ns[0])
        if len(durations) == count:  # once, after the last task: not on any measured path
            Path(out).write_text(" ".join(map(str, durations[WARMUP:])))  # noqa: ASYNC240

    Worker(url, queues={queue: 1}, concurrency=8).run_sync(reg, loop=loop)


async def produce(url: str, queues: list[str], n: int, gap: float) -> None:
    sys.path.insert(0, str(ROOT))
    from conveyor_sdk.client import Client

    async with Client(url) as client:
        for i in range(n):
            for queue in queues if i % 2 else reversed(queues):
                await client.enqueue("start", b"", queue=queue, content_type="application/octet-stream")
                await asyncio.sleep(gap)


def one_round(trees: dict[str, str], n: int, gap: float, loop: str) -> dict[str, float]:
    """Median start path (us) per tree for one fresh server and one pair of workers."""
    sys.path.insert(0, str(ROOT))
    from conveyor_server_min.testing import ServerProcess

    with tempfile.TemporaryDirectory() as tmp, ServerProcess(["--dev"]) as srv:
        outs = {name: os.path.join(tmp, f"{name}.txt") for name in trees}
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", srv.url, name, tree, outs[name], str(n), loop],
                cwd=tmp,
            )
            for name, tree in trees.items()
        ]
        try:
            time.sleep(0.5)  # not a correctness wait: tasks sent before a worker connects wait for it
            asyncio.run(produce(srv.url, list(trees), n, gap))
            end = time.monotonic() + 60
            while not all(os.path.exists(p) and os.path.getsize(p) for p in outs.values()):
                if time.monotonic() > end:
                    raise TimeoutError("a worker did not report all its tasks in 60 s")
                time.sleep(0.05)
            return {
                name: statistics.median(int(x) for x in Path(path).read_text().split()) / 1000
                for name, path in outs.items()
            }
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2:8])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", default=str(ROOT), help="source tree to compare with (default: this one)")
    ap.add_argument("--tasks", type=int, default=500)
    ap.add_argument("--gap-ms", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    args = ap.parse_args()
    other = str(Path(args.other).resolve())
    if not (Path(other) / "conveyor_sdk" / "_transport" / "session.py").exists():
        sys.exit(f"start_path_bench: {other} is not a source tree with conveyor_sdk")
    trees = {"other": other, "this": str(ROOT)}
    print(f"this tree {ROOT}, other {other}")
    print(f"{args.tasks} tasks to each, one every {args.gap_ms} ms, loop {args.loop}")
    ratios = []
    for r in range(1, args.rounds + 1):
        med = one_round(trees, args.tasks, args.gap_ms / 1000, args.loop)
        ratios.append(med["this"] / med["other"])
        times = f"other {med['other']:.1f} us   this {med['this']:.1f} us"
        print(f"  round {r}: {times}   this / other {ratios[-1]:.3f}")
    print(f"this / other, median of rounds: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
