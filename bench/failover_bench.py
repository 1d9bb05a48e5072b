"""Failover under load on a conveyord cluster: kill -9 the node a worker is on, measure its idle gap.

    CONVEYORD=/work/upstream-build/bin/conveyord BASE=33000 GOMAXPROCS=4 LEASE_TTL=10s \
        bash /work/shared/tools/conveyord.sh cluster
    CONVEYORD=... BASE=33000 python bench/failover_bench.py --urls http://127.0.0.1:33010,http://127.0.0.1:33020,http://127.0.0.1:33030

Three in-process Workers, each given all addresses (rotated, so each starts on its own node), a
producer at --rate tasks/s with all addresses. After --warmup seconds the node of worker 0 is
killed with ``conveyord.sh kill N`` (needs CONVEYORD and BASE in the environment). Reported:
worker 0's time from the kill to its first task start after it, the producer's rate in the
5 s after the kill, and whether every enqueued task ran. ``--log FILE`` writes the workers' INFO
log there (connects, set-up failures, reconnect waits with their backoff), to see where the idle
time went. Simplification: in-process Workers; tests/interop/test_cluster.py also runs
`conveyor worker` processes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import time

from conveyor_sdk.client import Client
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker

SCRIPT = "/work/shared/tools/conveyord.sh"


def _urls(base: int) -> list[str]:
    return [f"http://127.0.0.1:{base + n * 10}" for n in (1, 2, 3)]


async def main(args: argparse.Namespace) -> None:
    urls = args.urls.split(",") if args.urls else _urls(int(os.environ.get("BASE", "33000")))
    starts: dict[int, list[float]] = {0: [], 1: [], 2: []}
    done: set[str] = set()
    queue = f"fo{int(time.time())}"

    def registry(i: int) -> Registry:
        reg = Registry()

        @reg.handler("fo")
        async def fo(task: TaskData, ctx: TaskContext) -> None:
            starts[i].append(time.monotonic())
            await asyncio.sleep(args.work)  # the three workers' 12 slots are needed at --rate
            done.add(task.id)

        return reg

    workers = [Worker(urls[i:] + urls[:i], queues=[queue], concurrency=4, task_log=False) for i in range(3)]
    runs = [asyncio.create_task(w.run(registry(i))) for i, w in enumerate(workers)]
    sent: list[tuple[float, str]] = []
    async with Client(urls) as client:
        stop_at = time.monotonic() + args.warmup + args.after

        async def produce() -> None:
            t = time.monotonic()
            while t < stop_at:
                sent.append((time.monotonic(), (await client.enqueue("fo", b"", queue=queue)).id))
                t += 1 / args.rate
                await asyncio.sleep(max(0.0, t - time.monotonic()))

        prod = asyncio.create_task(produce())
        await asyncio.sleep(args.warmup)
        node = urls.index(workers[0].server) + 1
        killed = time.monotonic()
        subprocess.run(["bash", SCRIPT, "kill", str(node)], check=True, capture_output=True)  # noqa: ASYNC221  # the kill is the measured moment
        await prod
        before = [s for s in starts[0] if s < killed]
        after = [s for s in starts[0] if s >= killed]
        gap = (after[0] - killed) if after else float("inf")
        window = [s for s, _ in sent if killed <= s < killed + 5]
        print(f"killed node {node}; worker 0 now on {workers[0].server}")
        print(f"worker 0 idle after the kill: {gap:.2f}s (last start {killed - before[-1]:.2f}s before)")
        print(f"producer: {len(window) / 5:.1f}/s in the 5 s after the kill (target rate {args.rate}/s)")
        deadline = time.monotonic() + args.drain
        ids = {i for _, i in sent}
        while not ids <= done and time.monotonic() < deadline:  # noqa: ASYNC110  # a bench's poll
            await asyncio.sleep(0.5)
        print(f"tasks: {len(ids)} enqueued, {len(ids & done)} ran, missing {len(ids - done)}")
    for w in workers:
        w.stop(immediate=True)
    await asyncio.gather(*runs, return_exceptions=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--urls", default="")
    p.add_argument("--rate", type=float, default=40.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--after", type=float, default=8.0)
    p.add_argument("--drain", type=float, default=60.0)
    p.add_argument("--work", type=float, default=0.25, help="seconds each task takes")
    p.add_argument("--log", default="", help="write the workers' INFO log to this file")
    parsed = p.parse_args()
    if parsed.log:
        fmt = "%(asctime)s %(levelname)s %(name)s %(message)s"
        logging.basicConfig(level=logging.INFO, filename=parsed.log, format=fmt)
    asyncio.run(main(parsed))
