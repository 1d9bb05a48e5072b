"""The reference server in the test's own event loop, for client tests that only need a peer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conveyor_sdk.testing.memory import MemoryServer
from conveyor_server_min.config import ServerConfig
from conveyor_server_min.server import Server
from conveyor_server_min.service_api import EngineConfig

# The timings of tests/conftest.py's FAST_ARGS, as engine settings.
FAST_ENGINE = EngineConfig(
    lease_ttl=2.0,
    reap_interval=0.2,
    promote_interval=0.1,
    group_max_size=3,
    group_grace_period=0.5,
    group_sweep_interval=0.1,
)


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
