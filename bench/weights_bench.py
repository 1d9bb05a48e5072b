"""wa's share of the first 40 starts with ``-q wa=3 -q wb=1``, concurrency 4, both queues backlogged.

Usage: python bench/weights_bench.py http://127.0.0.1:PORT [--protocol grpc|connect] [--backlog N]

Prints one line for the in-process Worker and one for the runtime (``conveyor worker``,
4 child processes x 1 slot). Each phase enqueues its backlog on fresh queue names first, so
leftovers of a previous run do not count. Target: 0.75 +- 0.05 against either server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from conveyor_sdk.client import Client
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker

STARTS = 40
APP = """
import os
from conveyor_sdk._worker.registry import Registry

app = Registry()

@app.handler("w")
def w(task, ctx):
    with open(os.environ["WEIGHTS_BENCH_OUT"], "a") as out:
        out.write(task.queue.split("-")[0] + "\\n")
"""


async def _backlog(client: Client, queues: tuple[str, str], count: int) -> None:
    for _ in range(count):
        for queue in queues:
            await client.enqueue("w", b"", queue=queue, retention=600)


async def in_process(url: str, protocol: str, backlog: int) -> float:
    tag = uuid.uuid4().hex[:6]
    wa, wb = f"wa-{tag}", f"wb-{tag}"
    async with Client(url, protocol=protocol) as client:  # type: ignore[arg-type]
        await _backlog(client, (wa, wb), backlog)
    starts: list[str] = []
    reg = Registry()

    @reg.handler("w")
    def w(task: TaskData, ctx: TaskContext) -> None:
        starts.append(task.queue.split("-")[0])
        if len(starts) == STARTS:
            worker.stop(immediate=True)

    worker = Worker(url, protocol=protocol, queues={wa: 3, wb: 1}, concurrency=4)  # type: ignore[arg-type]
    await asyncio.wait_for(worker.run(reg), 60)
    return starts[:STARTS].count("wa") / STARTS


async def _enqueue(url: str, protocol: str, queues: tuple[str, str], backlog: int) -> None:
    async with Client(url, protocol=protocol) as client:  # type: ignore[arg-type]
        await _backlog(client, queues, backlog)


def runtime(url: str, protocol: str, backlog: int) -> float:
    tag = uuid.uuid4().hex[:6]
    wa, wb = f"wa-{tag}", f"wb-{tag}"
    asyncio.run(_enqueue(url, protocol, (wa, wb), backlog))
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "weightsapp.py").write_text(APP)
        out = Path(folder, "starts.txt")
        out.touch()
        env = {**os.environ, "WEIGHTS_BENCH_OUT": str(out)}
        cmd = [sys.executable, "-m", "conveyor_cli", "worker", "weightsapp:app", "--server", url,
               "-q", f"{wa}=3", "-q", f"{wb}=1", "--processes", "4", "--concurrency", "4"]  # fmt: skip
        log_path = os.environ.get("WEIGHTS_BENCH_LOG")  # keep the worker's log, to see why a run drifts
        log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 60
            while len(out.read_text().split()) < STARTS:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"runtime: fewer than {STARTS} starts in 60 s")
                time.sleep(0.05)  # a bench script polling a file, not a test
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        starts = out.read_text().split()
    if os.environ.get("WEIGHTS_BENCH_SHOW"):
        print("runtime order:", "".join(q[1] for q in starts[:STARTS]))
    return starts[:STARTS].count("wa") / STARTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--protocol", default="grpc", choices=["grpc", "connect"])
    parser.add_argument("--backlog", type=int, default=60, help="tasks enqueued per queue and phase")
    args = parser.parse_args()
    shares = {
        "in-process Worker": asyncio.run(in_process(args.url, args.protocol, args.backlog)),
        "runtime": runtime(args.url, args.protocol, args.backlog),
    }
    for name, share in shares.items():
        print(f"{name:18s} wa share of the first {STARTS} starts: {share:.3f}")


if __name__ == "__main__":
    main()
