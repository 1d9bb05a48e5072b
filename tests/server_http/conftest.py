"""Fixtures for transport tests: an in-thread server over a fake ServiceSet."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from conveyor_server_min.testing import ServerProcess

from .fakes import FakeServices, ThreadServer


@pytest.fixture(scope="module")
def fake_server() -> Iterator[ThreadServer]:
    """A dev-mode in-thread server (auth off) over :class:`FakeServices`."""
    with ThreadServer(FakeServices()) as server:
        yield server


@pytest.fixture(scope="module")
def auth_server() -> Iterator[ThreadServer]:
    """An in-thread server that requires ``Bearer s3cret`` or ``Bearer other``."""
    with ThreadServer(FakeServices(), dev=False, tokens=("s3cret", "other")) as server:
        yield server


@pytest.fixture
def server_proc() -> Iterator[Callable[..., ServerProcess]]:
    """Like the root ``server_factory`` (exit code 0 asserted) but also closes each child's stdout pipe."""
    started: list[ServerProcess] = []

    def start(args: Sequence[str] = (), **kwargs: object) -> ServerProcess:
        proc = ServerProcess(args, **kwargs)  # type: ignore[arg-type]
        started.append(proc)
        proc.start()
        return proc

    yield start
    codes = [proc.stop() for proc in started]
    for proc in started:
        if proc.proc is not None and proc.proc.stdout is not None:
            proc.proc.stdout.close()
    assert codes == [0] * len(codes), f"server exit codes {codes}"
