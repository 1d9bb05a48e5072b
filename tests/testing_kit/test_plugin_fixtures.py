"""The plugin's fixtures, used as an application's tests use them: plain and async (anyio) tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.testing import AppRunner
from conveyor_sdk.types import TaskState
from examples import shop
from examples.shop import Order


@pytest.fixture
def anyio_backend() -> str:
    """anyio runs these tests on asyncio."""
    return "asyncio"


def test_client_fixture_enqueues(conveyor_client: SyncClient) -> None:
    """conveyor_client is a blocking client on the fixture server."""
    info = shop.charge.enqueue(conveyor_client, Order(2))
    assert conveyor_client.get_task(info.id).state is TaskState.PENDING


@pytest.mark.anyio
async def test_runner_fixture_in_an_async_test(conveyor_app_runner: Callable[..., AppRunner]) -> None:
    """An async test enters the runner in its own loop and runs a depends_on chain."""
    async with conveyor_app_runner(shop.app) as runner:
        charge = await runner.enqueue(shop.charge, Order(5))
        ship = await runner.enqueue(shop.ship, Order(5), depends_on=[charge.id])
        result = await runner.run_until_idle()
    assert result[charge.id].retried == 1 and result[ship.id].ok
