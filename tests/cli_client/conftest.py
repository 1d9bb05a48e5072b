"""A module-scoped reference server so the end-to-end client tests share one process."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import pytest

from conveyor_server_min.testing import ServerProcess
from tests.conftest import FAST_ARGS


@contextlib.contextmanager
def running_server(args: Sequence[str]) -> Iterator[ServerProcess]:
    """A server that must exit cleanly; its output pipe is closed afterwards."""
    proc = ServerProcess(args)
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        if proc.proc is not None and proc.proc.stdout is not None:
            proc.proc.stdout.close()  # ServerProcess.stop() leaves the pipe open (ResourceWarning at GC)
    assert code == 0, proc.output[-20:]


@pytest.fixture(scope="module")
def shared_server() -> Iterator[ServerProcess]:
    """One dev-mode server per test module; must exit cleanly."""
    with running_server(FAST_ARGS) as proc:
        yield proc


@pytest.fixture
def url(shared_server: ServerProcess) -> str:
    """URL of the shared server."""
    return shared_server.url
