"""The in-process Worker over a blackholed link: noticed within the keepalive bound, then the next address."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from conveyor_sdk.client import Client
from conveyor_sdk.testing.faultproxy import FaultProxy
from conveyor_sdk.types import TaskState
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker
from tests._util import eventually
from tests.sdk_worker._helpers import KEEP, running, wait_state

INTERVAL, TIMEOUT = 0.3, 0.7
BOUND = INTERVAL + TIMEOUT  # from the last answered PING to the verdict


class Lines(logging.Handler):
    """Keeps every formatted record."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage()))

    def first(self, text: str) -> float | None:
        return next((t for t, line in self.lines if text in line), None)


def _logger(name: str) -> tuple[logging.Logger, Lines]:
    lines = Lines()
    logger = logging.getLogger(f"conveyor.test.{name}")
    logger.handlers[:] = [lines]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger, lines


def test_options_are_validated() -> None:
    """A zero or negative keepalive interval or timeout is a ValueError at construction."""
    with pytest.raises(ValueError, match="keepalive interval"):
        Worker("http://127.0.0.1:1", keepalive_interval=0)
    with pytest.raises(ValueError, match="keepalive timeout"):
        Worker("http://127.0.0.1:1", keepalive_timeout=-1)
    assert Worker("http://127.0.0.1:1").transport_options.keepalive.interval == 5.0


def test_blackhole_is_noticed_and_the_worker_moves_to_the_next_address(server_url: str) -> None:
    """Link A blackholed mid-task: the session ends within the keepalive bound, the running task is
    cancelled and logged abandoned (never hangs), and work resumes over address B."""
    runs: list[str] = []
    cancelled: list[float] = []
    logger, lines = _logger("blackhole")
    reg = Registry()

    @reg.handler("slow")
    async def slow(task: TaskData, ctx: TaskContext) -> bytes:
        runs.append(task.id)
        if len(runs) == 1:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(time.monotonic())
                raise
        return b"ok"

    async def main() -> None:
        target = server_url.removeprefix("http://")
        async with FaultProxy(target) as a, FaultProxy(target) as b:
            worker = Worker(
                [a.url, b.url],
                keepalive_interval=INTERVAL,
                keepalive_timeout=TIMEOUT,
                logger=logger,
                concurrency=2,
            )
            async with Client(server_url) as client, running(worker, reg):
                info = await client.enqueue("slow", b"", **KEEP)
                await eventually(lambda: _true(runs), timeout=15, what="the first run")
                assert worker.server == a.url
                a.blackhole("both")
                started = time.monotonic()
                await wait_state(client, info.id, TaskState.COMPLETED, timeout=30)
                noticed = lines.first("the connection to the server is dead")
                assert noticed is not None, lines.lines
                assert noticed - started <= BOUND + 0.5
                assert cancelled and cancelled[0] - started <= BOUND + 1.0
                assert lines.first(f"task {info.id} (slow) abandoned") is not None
                assert worker.server == b.url and worker.phase == "open"
                assert runs == [info.id, info.id]

    asyncio.run(main())


async def _true(values: list[str]) -> bool:
    return bool(values)


def test_one_way_loss_is_noticed_too(server_url: str) -> None:
    """Only the server's bytes lost (its Dispatches and PING answers): the session still ends in time."""
    logger, lines = _logger("oneway")

    async def main() -> None:
        async with FaultProxy(server_url.removeprefix("http://")) as a:
            worker = Worker(a.url, keepalive_interval=INTERVAL, keepalive_timeout=TIMEOUT, logger=logger)
            async with running(worker, Registry()):
                await eventually(lambda: _phase(worker, "open"), timeout=15, what="session open")
                a.blackhole("down")
                started = time.monotonic()
                await eventually(
                    lambda: _has(lines, "the connection to the server is dead"), timeout=10, what="noticed"
                )
                noticed = lines.first("the connection to the server is dead")
                assert noticed is not None and noticed - started <= BOUND + 0.5
                assert worker.last_session_error is not None
                await a.heal()
                await eventually(lambda: _phase(worker, "open"), timeout=15, what="session again")
                assert worker.last_session_error is None

    asyncio.run(main())


async def _phase(worker: Worker, phase: str) -> bool:
    return worker.phase == phase


async def _has(lines: Lines, text: str) -> bool:
    return lines.first(text) is not None
