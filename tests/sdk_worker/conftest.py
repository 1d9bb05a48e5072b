"""Worker-test fixtures: like the shared ``server_factory`` but closing each server's output pipe.

The shared ``ServerProcess.stop()`` leaves ``proc.stdout`` open, which surfaces as a
ResourceWarning (an error under filterwarnings=error) in the *next* test; this override
closes the pipe after the exit-code check. Reported to the server-harness owner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from conveyor_server_min.testing import ServerProcess


@pytest.fixture
def server_factory() -> Iterator[Callable[..., ServerProcess]]:
    """Start servers with given flags; each is stopped, must exit 0, and has its pipe closed."""
    started: list[ServerProcess] = []

    def start(args: Sequence[str] = (), **kwargs: object) -> ServerProcess:
        proc = ServerProcess(args, **kwargs)  # type: ignore[arg-type]
        proc.start()
        started.append(proc)
        return proc

    yield start
    codes = [proc.stop() for proc in started]
    for proc in started:
        if proc.proc is not None and proc.proc.stdout is not None:
            proc.proc.stdout.close()
    assert codes == [0] * len(codes), f"server exit codes {codes}"
