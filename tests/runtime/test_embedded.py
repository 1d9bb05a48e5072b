"""Finding the worker's server: the embedded one prefers a fixed port and prints a line to paste."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk._runtime.embedded import DEFAULT_PORT, PORT_ENV, preferred_port
from tests.runtime._worker_proc import WorkerProc

Factory = Callable[..., WorkerProc]

APP = """
from conveyor_sdk._worker.registry import Registry

app = Registry()

@app.handler("noop")
def noop(task, ctx):
    return b"ok"
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _export_line(proc: WorkerProc) -> str:
    proc.wait_for("export CONVEYOR_ADDR=")
    [line] = [ln.rstrip("\n") for ln in proc.lines if ln.startswith("export CONVEYOR_ADDR=")]
    return line


def _pasted(line: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run the printed line in a shell, then an operator command with no --server (as a person would)."""
    env = {k: v for k, v in os.environ.items() if k != "CONVEYOR_ADDR"}
    script = f"{line}\n{sys.executable} -m conveyor_cli enqueue noop -o json"
    return subprocess.run(
        ["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_preferred_port_defaults_to_8080_and_validates_the_variable() -> None:
    """No variable: 8080; a number is taken as is; junk or out-of-range values are a ValueError."""
    assert preferred_port({}) == DEFAULT_PORT == 8080
    assert preferred_port({PORT_ENV: "0"}) == 0
    assert preferred_port({PORT_ENV: " 9001 "}) == 9001
    for bad in ("http", "70000", "-1"):
        with pytest.raises(ValueError, match=PORT_ENV):
            preferred_port({PORT_ENV: bad})


def test_embedded_server_takes_the_preferred_port_when_free(tmp_path: Path, worker_factory: Factory) -> None:
    """Preferred port free: the server listens on it; the pasted export line makes operator commands work."""
    (tmp_path / "rtapp.py").write_text(APP)
    port = _free_port()
    proc = worker_factory(tmp_path, "rtapp:app", "--processes", "1", env={PORT_ENV: str(port)})
    line = _export_line(proc)
    assert line == f"export CONVEYOR_ADDR=http://127.0.0.1:{port}"
    done = _pasted(line, tmp_path)
    assert done.returncode == 0, done.stderr
    assert '"type": "noop"' in done.stdout
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_embedded_server_takes_another_port_when_the_preferred_one_is_taken(
    tmp_path: Path, worker_factory: Factory
) -> None:
    """Preferred port in use: a free port instead, named in the export line, which still works when pasted."""
    (tmp_path / "rtapp.py").write_text(APP)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = worker_factory(tmp_path, "rtapp:app", "--processes", "1", env={PORT_ENV: str(port)})
        line = _export_line(proc)
        assert line.startswith("export CONVEYOR_ADDR=http://127.0.0.1:")
        assert not line.endswith(f":{port}")
        done = _pasted(line, tmp_path)
        assert done.returncode == 0, done.stderr
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_invalid_preferred_port_variable_is_one_error_line(tmp_path: Path, worker_factory: Factory) -> None:
    """A junk CONVEYOR_EMBEDDED_PORT: one `error:` line, exit 1, nothing started."""
    (tmp_path / "rtapp.py").write_text(APP)
    proc = worker_factory(tmp_path, "rtapp:app", env={PORT_ENV: "eighty"})
    assert proc.wait(60) == 1
    assert proc.output.strip() == f"error: {PORT_ENV} must be a port number (0..65535), got 'eighty'"
