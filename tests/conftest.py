"""Shared fixtures: the reference server as a real subprocess on port 0."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from conveyor_server_min.testing import ServerProcess

# Short timings used by tests that exercise leases, reaping and groups.
FAST_ARGS = (
    "--lease-ttl", "2s",
    "--reap-interval", "200ms",
    "--promote-interval", "100ms",
    "--group-max-size", "3",
    "--group-grace-period", "500ms",
    "--group-sweep-interval", "100ms",
)  # fmt: skip


@pytest.fixture
def server_factory() -> Iterator[Callable[..., ServerProcess]]:
    """Start servers with given flags; each is stopped and must exit cleanly (code 0) at teardown."""
    started: list[ServerProcess] = []

    def start(args: Sequence[str] = (), **kwargs: object) -> ServerProcess:
        proc = ServerProcess(args, **kwargs)  # type: ignore[arg-type]
        proc.start()
        started.append(proc)
        return proc

    yield start
    codes = [proc.stop() for proc in started]
    assert codes == [0] * len(codes), f"server exit codes {codes}"


@pytest.fixture(scope="module")
def shared_server() -> Iterator[ServerProcess]:
    """One fast dev-mode server shared by a test module; it must exit cleanly (code 0)."""
    proc = ServerProcess(FAST_ARGS)
    proc.start()
    yield proc
    code = proc.stop()
    assert code == 0, "".join(proc.output[-20:])


@pytest.fixture(scope="module")
def url(shared_server: ServerProcess) -> str:
    """URL of the module's shared server."""
    return shared_server.url


@pytest.fixture
def server(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    """A dev-mode server (auth off) with short lease/reap/group timings."""
    return server_factory(FAST_ARGS)


@pytest.fixture
def server_url(server: ServerProcess) -> str:
    """URL of the ``server`` fixture, e.g. ``http://127.0.0.1:41234``."""
    return server.url
