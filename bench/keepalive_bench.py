"""Time for the in-process Worker to notice a blackholed link, over several runs.

A reference server (dev mode), a ``FaultProxy`` in front of it and one ``Worker`` (no tasks)
through the proxy. Each run waits for an established session, blackholes both directions
(bytes dropped, sockets open), and times the blackhole to the session's end ("the connection
to the server is dead"), then heals the link and waits for the next session. The blackhole
lands at a random point of the PING cycle, so the figure spreads between ``timeout`` and
``interval + timeout``.

Run:  .venv/bin/python bench/keepalive_bench.py [--runs 5] [--interval 5] [--timeout 10]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conveyor_sdk.testing.faultproxy import FaultProxy
from conveyor_sdk.worker import Registry, Worker
from conveyor_server_min.testing import ServerProcess


async def _until(cond: object, limit: float) -> None:
    deadline = time.monotonic() + limit
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {limit}s")
        await asyncio.sleep(0.01)


async def measure(url: str, runs: int, interval: float, give_up: float) -> list[float]:
    noticed: list[float] = []
    async with FaultProxy(url.removeprefix("http://")) as proxy:
        worker = Worker(proxy.url, keepalive_interval=interval, keepalive_timeout=give_up)
        task = asyncio.create_task(worker.run(Registry()))
        try:
            for _ in range(runs):
                await _until(lambda: worker.phase == "open", 60)
                await asyncio.sleep(random.uniform(0, interval))  # a random point of the PING cycle
                proxy.blackhole("both")
                started = time.monotonic()
                await _until(lambda: worker.phase != "open", 3 * (interval + give_up))
                noticed.append(time.monotonic() - started)
                print(f"noticed after {noticed[-1]:.2f}s: {worker.last_session_error}", flush=True)
                await proxy.heal()
        finally:
            worker.stop(immediate=True)
            await asyncio.wait_for(task, 30)
    return noticed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    args = ap.parse_args()
    server = ServerProcess(())
    server.start()
    try:
        times = asyncio.run(measure(server.url, args.runs, args.interval, args.timeout))
    finally:
        server.stop()
    print(
        f"keepalive {args.interval:g}s/{args.timeout:g}s, {len(times)} runs: min {min(times):.2f}s, "
        f"median {statistics.median(times):.2f}s, max {max(times):.2f}s "
        f"(bound: {args.timeout:g}-{args.interval + args.timeout:g}s)"
    )


if __name__ == "__main__":
    main()
