"""conveyorq (the upstream Python SDK) worker: ``python cq_worker.py URL QUEUE noop|cpu``.

It has no default concurrency; 10 is the value its own documentation shows.
"""

from __future__ import annotations

import asyncio
import sys

from common import cpu, mark, started
from conveyorq import Mux, Worker

CONCURRENCY = 10


def build(phase: str) -> Mux:
    mux = Mux()
    if phase == "cpu":

        @mux.handler("cpu")
        def cpu_task(task, ctx) -> None:  # type: ignore[no-untyped-def]
            cpu()

        return mux

    @mux.handler("noop")
    async def noop(task, ctx) -> None:  # type: ignore[no-untyped-def]
        mark("noop")

    @mux.handler("lat")
    async def lat(task, ctx) -> None:  # type: ignore[no-untyped-def]
        started(float(task.payload))

    return mux


if __name__ == "__main__":
    url, queue, phase = sys.argv[1:4]
    asyncio.run(Worker(url, queues={queue: 1}, concurrency=CONCURRENCY).run(build(phase)))
