"""Runtime test fixtures: no process may outlive a test; apps are written into tmp_path."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests._util import wait_until
from tests.runtime._procs import become_subreaper, live_descendants

become_subreaper()


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """After the test (and every other fixture's teardown), no descendant process is alive."""
    before = {pid for pid, _, _ in live_descendants()}
    yield
    wait_until(
        lambda: not [d for d in live_descendants() if d[0] not in before],
        timeout=15,
        what="all processes started by the test to exit",
    )


@pytest.fixture
def write_app(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``source`` as module ``name`` into tmp_path; returns the folder."""

    def write(name: str, source: str) -> Path:
        (tmp_path / f"{name}.py").write_text(source)
        return tmp_path

    return write
