"""3 conveyord nodes over Postgres: kill -9 the node a worker is on, under load; nothing is lost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from conveyor_sdk.client import Client
from conveyor_sdk.errors import ConveyorError
from conveyor_sdk.types import TaskState
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker
from tests.interop import _postgres
from tests.interop._conveyord import Conveyord
from tests.interop.conftest import binary
from tests.sdk_worker._helpers import running, wait_state

RATE = 40.0  # producer target, tasks/s


@pytest.fixture
def cluster() -> Iterator[list[Conveyord]]:
    """Three nodes (static discovery) over our own Postgres database; stopped at teardown."""
    why = _postgres.unavailable()
    if why:
        pytest.skip(why)
    dsn = _postgres.fresh_database()
    path = binary()
    assert path is not None
    nodes = [Conveyord(path, dsn=dsn, lease_ttl="2s", reap_interval="500ms") for _ in range(3)]
    peers = [n.ports[3] for n in nodes]
    for n in nodes:
        n.cluster_ports = peers
        n.launch()
    try:
        for n in nodes:
            n.wait_ready(90)
        yield nodes
    finally:
        for n in nodes:
            n.stop()


async def produce(urls: list[str], until: float, acked: list[str], stamps: list[float]) -> None:
    """Enqueue at RATE until ``until``; record each acknowledged id and its time."""
    async with Client(urls, timeout=5.0) as client:
        start = time.monotonic()
        i = 0
        while time.monotonic() < until:
            i += 1
            try:
                info = await client.enqueue("cl:job", b"", retention=3600)
                acked.append(info.id)
                stamps.append(time.monotonic())
            except ConveyorError:
                pass  # not acknowledged: not promised
            await asyncio.sleep(max(0.0, start + i / RATE - time.monotonic()))


def test_failover_under_load(cluster: list[Conveyord]) -> None:
    """The killed node's worker runs tasks again within 3 s, every acknowledged task completes, rate >=80%."""
    urls = [n.url for n in cluster]
    ran: list[list[float]] = [[], [], []]

    def registry(k: int) -> Registry:
        reg = Registry()

        @reg.handler("cl:job")
        async def job(task: TaskData, ctx: TaskContext) -> None:
            ran[k].append(time.monotonic())
            await asyncio.sleep(0.05)

        return reg

    async def main() -> tuple[float, float, list[str]]:
        workers = [Worker(urls[k:] + urls[:k], concurrency=4, task_log=False) for k in range(3)]
        acked: list[str] = []
        stamps: list[float] = []
        async with running(workers[0], registry(0)), running(workers[1], registry(1)):  # noqa: SIM117
            async with running(workers[2], registry(2)):
                t0 = time.monotonic()
                producer = asyncio.create_task(produce(urls[1:] + urls[:1], t0 + 12, acked, stamps))
                await asyncio.sleep(0)
                while len(acked) < 80 or len(ran[0]) < 10:  # under load, and worker 0 is working
                    assert time.monotonic() < t0 + 8, "no load before the kill"
                    await asyncio.sleep(0.05)
                killed = time.monotonic()
                await asyncio.to_thread(cluster[0].kill)
                await producer
                back = next((t for t in ran[0] if t > killed), None)
                after = [sum(1 for t in r if t > killed) for r in ran]
                assert back is not None, (
                    f"worker 0 never ran a task after the kill; starts per worker after: {after}"
                )
                rate = sum(1 for t in stamps if killed <= t < killed + 5) / 5
                async with Client(urls[1:]) as client:
                    for tid in acked:
                        await wait_state(client, tid, TaskState.COMPLETED, timeout=60)
        return back - killed, rate, acked

    idle, rate, acked = asyncio.run(main())
    print(
        f"failover: worker 0 idle {idle:.2f}s after kill -9, producer {rate:.1f}/s of {RATE}/s,"
        f" {len(acked)} tasks"
    )
    assert idle < 3.0
    assert rate >= 0.8 * RATE
