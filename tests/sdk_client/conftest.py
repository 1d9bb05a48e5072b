"""The reference server in the test's own event loop, for client tests that only need a peer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conveyor_sdk.testing.memory import MemoryServer
from conveyor_server_min.config import ServerConfig
from conveyor_server_min.server import Server
from tests.server_engine._harness import FAST

# The timings of tests/conftest.py's FAST_ARGS, as engine settings (the engine tests' own).
FAST_ENGINE = FAST


def memory_server(**config: Any) -> MemoryServer:
    """A dev-mode reference server with the fast timings (``config``: other ServerConfig fields)."""
    config.setdefault("dev", not config.get("tokens"))
    config.setdefault("engine", FAST_ENGINE)
    return MemoryServer(Server(ServerConfig(**config)))  # type: ignore[arg-type]  # Server is Servable


@pytest.fixture
def memory() -> Callable[..., MemoryServer]:
    """``memory(**config)``: a MemoryServer to enter with ``async with`` in the test's event loop;
    ``server.client(**options)`` is an async Client on it (no subprocess, no socket)."""
    return memory_server
