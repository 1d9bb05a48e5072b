"""pytest fixtures for application tests, registered through the ``pytest11`` entry point.

``pip install conveyor-py`` is enough: pytest loads this module and offers

* ``conveyor_server`` — a reference server on port 0 (one per test module; fast retry promotion);
* ``conveyor_server_url`` — its URL;
* ``conveyor_client`` — a :class:`~conveyor_sdk.client.SyncClient` on it (plain tests);
* ``conveyor_app_runner`` — a factory ``conveyor_app_runner(app) -> AppRunner``: enter the runner
  with ``async with`` inside the test's event loop (``asyncio.run``, pytest-asyncio or anyio).

The names carry a ``conveyor_`` prefix so they never shadow a project's own ``server`` or
``client`` fixtures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conveyor_sdk.app import App
from conveyor_sdk.client import SyncClient
from conveyor_sdk.testing.runner import AppRunner, start_server
from conveyor_server_min.testing import ServerProcess

__all__ = ["conveyor_app_runner", "conveyor_client", "conveyor_server", "conveyor_server_url"]


@pytest.fixture(scope="module")
def conveyor_server() -> Iterator[ServerProcess]:
    """A reference server on port 0, shared by the test module."""
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def conveyor_server_url(conveyor_server: ServerProcess) -> str:
    """``http://127.0.0.1:PORT`` of ``conveyor_server``."""
    return conveyor_server.url


@pytest.fixture
def conveyor_client(conveyor_server_url: str) -> Iterator[SyncClient]:
    """A blocking client on ``conveyor_server``."""
    with SyncClient(conveyor_server_url) as client:
        yield client


@pytest.fixture
def conveyor_app_runner(conveyor_server_url: str) -> Callable[..., AppRunner]:
    """``conveyor_app_runner(app, **options)``: an :class:`AppRunner` on ``conveyor_server``."""

    def make(app: App, **options: Any) -> AppRunner:
        return AppRunner(app, conveyor_server_url, **options)

    return make
