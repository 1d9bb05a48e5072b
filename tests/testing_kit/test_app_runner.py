"""AppRunner runs examples/shop.py's real handlers against a real reference server on port 0."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from conveyor_sdk.testing import AppRunner, start_server
from conveyor_sdk.types import TaskState
from conveyor_server_min.testing import ServerProcess
from examples import shop
from examples.shop import Order


@pytest.fixture(scope="module")
def shop_server() -> Iterator[ServerProcess]:
    """One fast-promoting server for the module."""
    server = start_server()
    yield server
    server.stop()


def test_retry_skip_retry_timeout_batch_and_chain(shop_server: ServerProcess) -> None:
    """Each task's outcome, retries and error come back from run_until_idle."""

    async def main() -> None:
        async with AppRunner(shop.app, shop_server.url) as runner:
            flaky = await runner.enqueue(shop.charge, Order(1))
            free = await runner.enqueue(shop.charge, Order(2, amount=0))
            ship = await runner.enqueue(shop.ship, Order(1), depends_on=[flaky.id])
            slow = await runner.enqueue(shop.invoice, Order(3, amount=2000))
            audits = [await runner.enqueue(shop.audit, Order(n)) for n in range(3)]
            result = await runner.run_until_idle(timeout=20)
        assert result[flaky.id].ok and result[flaky.id].retried == 1
        assert "gateway" in result[flaky.id].error
        assert result[free.id].state is TaskState.ARCHIVED and "nothing to charge" in result[free.id].error
        assert result[free.id].retried == 0
        assert result[ship.id].ok
        assert result[slow.id].state is TaskState.ARCHIVED
        assert all(result[a.id].ok for a in audits)

    asyncio.run(main())


def test_cancel_ends_a_waiting_task(shop_server: ServerProcess) -> None:
    """A task cancelled while running ends archived with the reason; one cancelled while queued, canceled."""

    async def main() -> None:
        async with AppRunner(shop.app, shop_server.url) as runner:
            waiting = await runner.enqueue(shop.wait_for_stock, Order(9))
            runner.cancel_when_started(waiting.id)
            queued = await runner.enqueue(shop.wait_for_stock, Order(10))
            await runner.cancel(queued.id)
            result = await runner.run_until_idle(timeout=20)
        # The server archives a task cancelled while running, with the reason as its error.
        assert result[waiting.id].state is TaskState.ARCHIVED
        assert "canceled" in result[waiting.id].error
        assert result[queued.id].state is TaskState.CANCELED

    asyncio.run(main())


def test_track_waits_for_tasks_enqueued_another_way(shop_server: ServerProcess) -> None:
    """Tasks from client.enqueue_batch join the run with track() and come back in its result."""

    async def main() -> None:
        async with AppRunner(shop.app, shop_server.url) as runner:
            specs = [shop.audit.spec(Order(n)) for n in range(4)]
            committed = await runner.client.enqueue_batch(specs)
            for item in committed:
                assert item.task is not None
                runner.track(item.task)
            result = await runner.run_until_idle(timeout=20)
        assert len(result.of_type("shop:audit")) == 4 and result.all_ok

    asyncio.run(main())
