"""A worker without --server whose preferred port already holds a Conveyor server says so loudly."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from pathlib import Path

from conveyor_sdk._runtime.embedded import PORT_ENV, answers_as_conveyor
from conveyor_server_min.testing import ServerProcess
from tests.runtime._worker_proc import WorkerProc

Factory = Callable[..., WorkerProc]

APP = """
from conveyor_sdk._worker.registry import Registry

app = Registry()

@app.handler("noop")
def noop(task, ctx):
    return b"ok"
"""


def test_worker_warns_and_names_the_running_server(
    tmp_path: Path, worker_factory: Factory, server: ServerProcess
) -> None:
    """Preferred port = a running reference server: a WARNING line with `--server http://127.0.0.1:<port>`."""
    (tmp_path / "rtapp.py").write_text(APP)
    port = server.url.rsplit(":", 1)[1]
    proc = worker_factory(tmp_path, "rtapp:app", "--processes", "1", env={PORT_ENV: port})
    proc.wait_for("export CONVEYOR_ADDR=")
    [warning] = [ln for ln in proc.lines if "already answers" in ln]
    assert "WARNING" in warning
    assert f"--server http://127.0.0.1:{port}" in warning
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_a_port_held_by_something_else_is_not_a_conveyor_server(server: ServerProcess) -> None:
    """The probe: the reference server answers as Conveyor; a bare listening socket does not."""
    assert answers_as_conveyor(server.url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert not answers_as_conveyor(f"http://127.0.0.1:{taken.getsockname()[1]}", timeout=0.5)


def test_sigterm_during_start_up_drains_instead_of_orphaning_the_server(
    tmp_path: Path, worker_factory: Factory
) -> None:
    """A SIGTERM between spawning the children and the first session (the embedded server still
    starting) is not the default instant death: the worker exits 0 and its embedded server is gone."""
    (tmp_path / "rtapp.py").write_text(APP)
    proc = worker_factory(tmp_path, "rtapp:app", "--processes", "1", env={PORT_ENV: "0"})
    proc.wait_for("started 1 child processes")
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
    assert "SIGTERM during start-up" in proc.output
    url = proc.output.split("embedded server listening on ", 1)[1].split()[0]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.socket() as probe:
        assert probe.connect_ex((host, int(port))) != 0  # nothing answers: the server was stopped
