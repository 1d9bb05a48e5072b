"""Runtime test fixtures: no process may outlive a test; apps are written into tmp_path."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests._util import wait_until
from tests.runtime._procs import descendants, live_descendants, set_subreaper
from tests.runtime._worker_proc import WorkerProc


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """After the test (and every other fixture's teardown), no descendant process is alive."""
    before = {pid for pid, _, _ in descendants()}
    set_subreaper(True)
    yield
    try:
        wait_until(lambda: not live_descendants(before), timeout=15)
    except AssertionError:
        left = live_descendants(before)
        raise AssertionError(f"processes left behind: {left}") from None
    finally:
        set_subreaper(False)


@pytest.fixture
def write_app(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``source`` as module ``name`` into tmp_path; returns the folder."""

    def write(name: str, source: str) -> Path:
        (tmp_path / f"{name}.py").write_text(source)
        return tmp_path

    return write


@pytest.fixture
def worker_factory() -> Iterator[Callable[..., WorkerProc]]:
    """Start ``conveyor worker`` subprocesses; any still running at teardown is killed."""
    started: list[WorkerProc] = []

    def start(folder: Path, *args: str, env: dict[str, str] | None = None) -> WorkerProc:
        proc = WorkerProc(folder, args, env).start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.cleanup()
