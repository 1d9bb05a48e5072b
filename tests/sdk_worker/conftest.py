"""The reference server in the test's own event loop, for worker tests that only need a peer."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conveyor_sdk.testing.memory import MemoryServer
from tests.sdk_client.conftest import memory_server


@pytest.fixture
def memory() -> Callable[..., MemoryServer]:
    """``memory(**config)``: a MemoryServer (the fast timings of FAST_ARGS) to enter with
    ``async with`` in the test's event loop; ``server.worker(...)`` and ``server.client()`` reach it
    over in-memory connections (no subprocess, no socket)."""
    return memory_server
