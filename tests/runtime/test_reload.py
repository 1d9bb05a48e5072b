"""Reload never takes down a serving worker: broken code keeps the old children, the next change retries."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import TaskState
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.runtime._worker_proc import WorkerProc

pytestmark = pytest.mark.slow

APP = """
import os, pathlib
from conveyor_sdk._worker.registry import Registry

app = Registry()
VERSION = "v1"

@app.handler("version")
def version(task, ctx):
    (pathlib.Path(os.environ["RT_MARKS"]) / task.id).write_text(f"{VERSION} {os.getpid()}")
"""

BROKEN = {
    "syntax-error": APP + "\ndef oops(:\n",
    "raises-at-import": APP + "\nimport os\nos.environ['DATABASE_URL_NOT_SET_ANYWHERE']\n",
    "missing-attribute": APP.replace("app = Registry()", "application = Registry()").replace(
        "@app.handler", "@application.handler"
    ),
}
EXPECTED = {
    "syntax-error": "SyntaxError",
    "raises-at-import": "KeyError: 'DATABASE_URL_NOT_SET_ANYWHERE'",
    "missing-attribute": "has no attribute 'app'",
}
Factory = Callable[..., WorkerProc]


def _version(client: SyncClient, folder: Path, timeout: float = 30) -> tuple[str, int]:
    """Enqueue a `version` task and return (VERSION, pid) of the child that ran it."""
    info = client.enqueue("version", b"", retention=300)
    wait_until(
        lambda: client.get_task(info.id).state is TaskState.COMPLETED,
        timeout=timeout,
        interval=0.1,
        what="the version task to complete",
    )
    name, pid = (folder / "marks" / info.id).read_text().split()
    return name, int(pid)


def _start(factory: Factory, folder: Path, server: ServerProcess, *args: str) -> WorkerProc:
    (folder / "rtapp.py").write_text(APP)
    (folder / "marks").mkdir()
    # PYTHONDONTWRITEBYTECODE: two edits inside one second must never hit a stale .pyc
    env = {"RT_MARKS": str(folder / "marks"), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = factory(folder, "rtapp:app", "--server", server.url, *args, env=env)
    proc.wait_for("established")
    return proc


def _child_pids(proc: WorkerProc) -> set[int]:
    from tests.runtime._procs import descendants

    assert proc.proc is not None
    return {pid for pid, state, cmd in descendants(proc.proc.pid) if "_runtime.child" in cmd and state != "Z"}


@pytest.mark.parametrize("processes", ["1", "2"])
@pytest.mark.parametrize("breakage", sorted(BROKEN))
def test_sighup_with_broken_code_keeps_serving_then_good_code_reloads(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory, breakage: str, processes: str
) -> None:
    """SIGHUP + broken code: error and traceback, old code serves, a killed child returns on it too."""
    worker = _start(worker_factory, tmp_path, server, "--processes", processes)
    with SyncClient(server.url) as client:
        assert _version(client, tmp_path)[0] == "v1"
        (tmp_path / "rtapp.py").write_text(BROKEN[breakage])
        worker.signal(signal.SIGHUP)
        worker.wait_for("reload failed")
        worker.wait_for(EXPECTED[breakage])
        if breakage != "missing-attribute":
            assert "Traceback" in worker.output or "SyntaxError" in worker.output
            assert "rtapp.py" in worker.output  # the user's frame / file is named
        assert _version(client, tmp_path)[0] == "v1"
        # A child dying while the code on disk is broken is replaced with the last good code.
        victim = _version(client, tmp_path)[1]
        os.kill(victim, signal.SIGKILL)
        wait_until(
            lambda: victim not in _child_pids(worker) and len(_child_pids(worker)) == int(processes),
            timeout=30,
            what="a replacement child",
        )
        for _ in range(3):
            name, pid = _version(client, tmp_path)
            assert name == "v1" and pid != victim
        assert worker.proc is not None and worker.proc.poll() is None, worker.output
        (tmp_path / "rtapp.py").write_text(APP.replace('VERSION = "v1"', 'VERSION = "v2"'))
        worker.signal(signal.SIGHUP)
        worker.wait_for("reloaded")
        assert _version(client, tmp_path)[0] == "v2"
    assert "draining" not in worker.output
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.output


def test_reload_flag_retries_on_the_next_change_after_broken_code(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """--reload: a broken save is reported and old code serves; two more saves (broken, good) both retry."""
    worker = _start(worker_factory, tmp_path, server, "--processes", "1", "--reload")
    worker.wait_for("watching")
    with SyncClient(server.url) as client:
        (tmp_path / "rtapp.py").write_text(BROKEN["syntax-error"])
        wait_until(lambda: worker.output.count("reload failed") >= 1, timeout=30, what="a failed reload")
        assert _version(client, tmp_path)[0] == "v1"
        (tmp_path / "rtapp.py").write_text(BROKEN["raises-at-import"])
        wait_until(lambda: worker.output.count("reload failed") >= 2, timeout=30, what="a second failure")
        assert "DATABASE_URL_NOT_SET_ANYWHERE" in worker.output
        assert _version(client, tmp_path)[0] == "v1"
        (tmp_path / "rtapp.py").write_text(APP.replace('VERSION = "v1"', 'VERSION = "v3"'))
        worker.wait_for("reloaded")
        assert _version(client, tmp_path)[0] == "v3"
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.output
