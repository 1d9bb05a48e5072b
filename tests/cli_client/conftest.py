"""A module-scoped reference server so the end-to-end client tests share one process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conveyor_server_min.testing import ServerProcess
from tests.conftest import FAST_ARGS


@pytest.fixture(scope="module")
def shared_server() -> Iterator[ServerProcess]:
    """One dev-mode server per test module; must exit cleanly."""
    proc = ServerProcess(FAST_ARGS)
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.output[-20:]


@pytest.fixture
def url(shared_server: ServerProcess) -> str:
    """URL of the shared server."""
    return shared_server.url
