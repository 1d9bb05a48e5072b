"""Test-harness speed: 100 tasks through ``AppRunner.run_until_idle()`` vs a plain Worker + Client loop.

Both push the same tasks (examples/shop.py's ``shop:charge`` on even orders, which succeed
at once) through the same fresh reference server (port 0, ``--promote-interval 10ms``). The
figure is wall time from the first enqueue to the last task seen completed, worker start-up
and shutdown included (that is what a test pays). The baseline enqueues with a ``Client``,
runs a ``Worker`` as a task and polls ``get_task`` until every task is completed.

Run:  .venv/bin/python bench/harness_bench.py [--tasks 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conveyor_sdk.client import Client
from conveyor_sdk.testing import AppRunner, start_server
from conveyor_sdk.types import TaskState
from conveyor_sdk.worker import Worker
from examples import shop
from examples.shop import Order


async def harness(url: str, n: int) -> float:
    start = time.perf_counter()
    async with AppRunner(shop.app, url) as runner:
        for i in range(n):
            await runner.enqueue(shop.charge, Order(2 * i))
        result = await runner.run_until_idle()
    elapsed = time.perf_counter() - start
    assert result.all_ok and len(result.tasks) == n
    return elapsed


async def baseline(url: str, n: int) -> float:
    start = time.perf_counter()
    async with Client(url) as client:
        ids = [(await shop.charge.enqueue(client, Order(2 * i))).id for i in range(n)]
        worker = Worker(url, queues=["default"], concurrency=50, task_log=False)
        serving = asyncio.create_task(worker.run(shop.app))
        pending = set(ids)
        while pending:
            for task_id in list(pending):
                if (await client.get_task(task_id)).state is TaskState.COMPLETED:
                    pending.discard(task_id)
            if pending:
                await asyncio.sleep(0.005)
        worker.stop(immediate=True)
        await serving
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    server = start_server()
    try:
        runs: dict[str, list[float]] = {"harness (AppRunner)": [], "baseline (Worker+Client)": []}
        for _ in range(args.rounds):
            runs["harness (AppRunner)"].append(asyncio.run(harness(server.url, args.tasks)))
            runs["baseline (Worker+Client)"].append(asyncio.run(baseline(server.url, args.tasks)))
    finally:
        server.stop()
    print(f"{args.tasks} tasks, {args.rounds} rounds, same server (wall, enqueue to all completed)")
    for name, times in runs.items():
        median, best = statistics.median(times) * 1000, min(times) * 1000
        print(f"  {name:26} median {median:7.1f} ms   best {best:7.1f} ms")


if __name__ == "__main__":
    main()
