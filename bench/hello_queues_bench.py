"""Dispatch throughput when one worker declares many queues (issue 12, item 8).

Run:  .venv/bin/python bench/hello_queues_bench.py [--queues 1,5000,10000,50000] [--tasks 5000]

For each queue count K it starts a fresh ``python -m conveyor_server_min --dev`` on a free port,
enqueues ``--tasks`` no-op tasks into queue ``bench`` (EnqueueBatch) and drains them with the raw
gRPC session consumer of ``server_bench.py``:

* ``self``:  the draining worker's Hello declares ``bench`` plus K-1 empty queues;
* ``other``: an idle worker declaring K empty queues stays connected while a second worker that
  declares only ``bench`` drains (the cost one worker's Hello puts on everybody).

It prints tasks/s from the first Dispatch to the last. A run stops after ``--max-seconds`` and reports
the rate so far; a Hello the server refuses is reported as ``rejected``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from server_bench import QUEUE, RawConsumer, batch_enqueue  # noqa: E402

from conveyor_server_min.testing import ServerProcess  # noqa: E402


def _queues(count: int, with_bench: bool) -> dict[str, int]:
    names = {f"idle-{i:06d}": 1 for i in range(count - (1 if with_bench else 0))}
    return {QUEUE: 1, **names} if with_bench else names


async def _drain(url: str, queues: dict[str, int], args: argparse.Namespace) -> float | str:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    consumer = RawConsumer(host, int(port), args.concurrency, args.tasks, queues=queues)
    try:
        return args.tasks / await asyncio.wait_for(consumer.run(), args.max_seconds)
    except TimeoutError:
        if not consumer.first_dispatch:
            return "no dispatch"
        return consumer.done / (time.perf_counter() - consumer.first_dispatch)
    except ConnectionError:
        return "rejected"


async def _idle_worker(url: str, count: int, args: argparse.Namespace) -> RawConsumer:
    """Connect a worker with ``count`` empty queues and keep it connected (it gets no tasks)."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    idle = RawConsumer(host, int(port), args.concurrency, 1, queues=_queues(count, False))
    idle.task = asyncio.ensure_future(idle.run())  # type: ignore[attr-defined]  # kept alive on the object
    await asyncio.sleep(0.5 + count / 20_000)  # bench only: let the server register the Hello
    return idle


async def _one(url: str, count: int, mode: str, args: argparse.Namespace) -> float | str:
    await batch_enqueue(url, args.tasks)
    if mode == "self":
        return await _drain(url, _queues(count, True), args)
    idle = await _idle_worker(url, count, args)
    task: asyncio.Task[float] = idle.task  # type: ignore[attr-defined]
    try:
        rate = await _drain(url, {QUEUE: 1}, args)
    finally:
        if idle._writer is not None:
            idle._writer.close()
    if task.done() and isinstance(task.exception(), ConnectionError):
        return f"{_fmt(rate)} (idle Hello rejected)"
    task.cancel()
    return rate


def run(count: int, mode: str, args: argparse.Namespace) -> float | str:
    with ServerProcess([]) as server:
        return asyncio.run(_one(server.url, count, mode, args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--queues", default="1,5000,10000,50000")
    parser.add_argument("--modes", default="self,other")
    parser.add_argument("--tasks", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=15.0)
    args = parser.parse_args()
    print(f"tasks={args.tasks} concurrency={args.concurrency} repeat={args.repeat} (median tasks/s)")
    for mode in args.modes.split(","):
        for count in (int(c) for c in args.queues.split(",")):
            runs = [run(count, mode, args) for _ in range(args.repeat)]
            rates = [r for r in runs if isinstance(r, float)]
            if not rates:  # e.g. "12,000 (idle Hello rejected)": show every run
                print(f"{mode:>6} queues={count:>6}  runs={runs}", flush=True)
                continue
            shown = f"{statistics.median(rates):>10,.0f}" if rates else f"{runs[0]:>10}"
            print(f"{mode:>6} queues={count:>6}  {shown}   runs={[_fmt(r) for r in runs]}", flush=True)


def _fmt(rate: float | str) -> str:
    return f"{rate:,.0f}" if isinstance(rate, float) else rate


if __name__ == "__main__":
    main()
