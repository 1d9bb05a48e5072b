"""A worker with two addresses whose link to the first is blackholed resumes through the second
within 2 s of noticing (issue 33: "work resumed within 2 s ... of another address being there").

Two FaultProxy fronts on one reference server stand for two routes (or two nodes) to the work.
"""

from __future__ import annotations

import asyncio
import logging
import time

from conveyor_sdk.client import Client
from conveyor_sdk.testing import FaultProxy
from conveyor_sdk.worker import Registry, Worker
from tests._util import until

KA_INTERVAL, KA_TIMEOUT = 0.5, 1.0
NOTICE_BOUND = KA_INTERVAL + KA_TIMEOUT + 0.5  # last answer, next PING, its timeout, 2-core slack
RESUME_BOUND = 2.0


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((time.monotonic(), record.getMessage()))


def test_a_blackholed_first_address_resumes_through_the_second(server_url: str) -> None:
    asyncio.run(_other_address(server_url))


async def _other_address(server_url: str) -> None:
    started: list[tuple[float, str]] = []
    registry = Registry()

    @registry.handler("other.work")
    async def work(task: object, ctx: object) -> None:
        started.append((time.monotonic(), getattr(task, "id", "")))

    warnings = _Warnings()
    logger = logging.getLogger("tests.faults.other_address")
    logger.propagate = False
    logger.handlers[:] = [warnings]
    target = server_url.removeprefix("http://")
    async with FaultProxy(target) as first, FaultProxy(target) as second, Client(server_url) as client:
        worker = Worker(
            [first.url, second.url], queues=["other"], logger=logger,
            keepalive_interval=KA_INTERVAL, keepalive_timeout=KA_TIMEOUT,
        )  # fmt: skip
        run = asyncio.create_task(worker.run(registry))
        try:
            await until(lambda: worker.phase == "open", 10, what="the first session")
            assert worker.server == first.url
            await client.enqueue("other.work", b"", queue="other")
            await until(lambda: started, 10, what="a task through the first address")
            first.blackhole()
            cut = time.monotonic()
            await until(lambda: warnings.seen, NOTICE_BOUND + 1, what="the worker noticing the dead link")
            noticed, why = warnings.seen[0]
            assert noticed - cut <= NOTICE_BOUND, (noticed - cut, why)
            assert "PING" in why or "no progress" in why, why
            info = await client.enqueue("other.work", b"", queue="other")
            await until(lambda: any(t == info.id for _, t in started), 10, what="the task after the cut")
            ran = next(at for at, t in started if t == info.id)
            assert ran - noticed <= RESUME_BOUND, f"resumed {ran - noticed:.2f}s after noticing"
            assert worker.server == second.url and worker.phase == "open"
            assert second.stats.accepted >= 1
        finally:
            worker.stop()
            await run
