"""`conveyor worker` says what it did: a line per task (timeouts with their fate), --no-task-log,
quiet HTTP/2 loggers at --log-level debug, environment variables for its options, --version and -h."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import TaskState
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.runtime._worker_proc import WorkerProc

Factory = Callable[..., WorkerProc]

APP = """
import time

from conveyor_sdk.app import App

app = App(tracing=False)

@app.task("rep:ok", queue="rep", retention=3600)
def ok(payload: dict, ctx) -> None:
    return None

@app.task("rep:hang", queue="rep", max_retry=0, timeout=0.5, retention=3600)
async def hang(payload: dict, ctx) -> None:
    import asyncio
    await asyncio.sleep(3600)
"""


def _finished(client: SyncClient, task_id: str, state: TaskState) -> bool:
    return client.get_task(task_id).state == state


def _run(
    tmp_path: Path,
    worker_factory: Factory,
    server: ServerProcess,
    *extra: str,
    env: dict[str, str] | None = None,
) -> tuple[WorkerProc, str, str, int]:
    (tmp_path / "repapp.py").write_text(APP)
    proc = worker_factory(tmp_path, "repapp:app", "--server", server.url, "--processes", "1", *extra, env=env)
    proc.wait_for("session ")
    with SyncClient(server.url) as client:
        ok = client.enqueue("rep:ok", b"{}", queue="rep", retention=3600, content_type="application/json")
        hang = client.enqueue(
            "rep:hang",
            b"{}",
            queue="rep",
            retention=3600,
            content_type="application/json",
            max_retry=1,
            timeout=0.5,
        )
        wait_until(lambda: _finished(client, ok.id, TaskState.COMPLETED), timeout=30, what="ok completed")
        wait_until(lambda: _finished(client, hang.id, TaskState.ARCHIVED), timeout=30, what="hang archived")
        retried = client.get_task(hang.id).retried
    wait_until(lambda: f"task {hang.id}" in proc.output, timeout=10, what="the timeout's line")
    return proc, ok.id, hang.id, retried


def test_every_task_gets_a_line_and_a_timeout_says_it_is_not_retried(
    tmp_path: Path, worker_factory: Factory, server: ServerProcess
) -> None:
    """A success logs `succeeded in`; a never-retry timeout `failed, not retried (archived): deadline ...`."""
    proc, ok_id, hang_id, retried = _run(tmp_path, worker_factory, server)
    assert retried == 0
    assert f"task {ok_id} (rep:ok) succeeded in " in proc.output
    assert f"task {hang_id} (rep:hang) failed, not retried (archived): deadline exceeded" in proc.output
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_no_task_log_and_quiet_http2_loggers_at_debug(
    tmp_path: Path, worker_factory: Factory, server: ServerProcess
) -> None:
    """CONVEYOR_TASK_LOG=0 drops success lines (not failures); --log-level debug has no hpack lines."""
    proc, ok_id, hang_id, _ = _run(
        tmp_path, worker_factory, server, "--log-level", "debug", env={"CONVEYOR_TASK_LOG": "0"}
    )
    assert f"task {ok_id} " not in proc.output
    assert f"task {hang_id} (rep:hang) failed" in proc.output
    assert "hpack" not in proc.output and " h2" not in proc.output
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_worker_options_read_their_environment_variables(tmp_path: Path, worker_factory: Factory) -> None:
    """CONVEYOR_CONCURRENCY=0 is refused as --concurrency would be; --help names the variables."""
    (tmp_path / "repapp.py").write_text(APP)
    proc = worker_factory(tmp_path, "repapp:app", env={"CONVEYOR_CONCURRENCY": "0"})
    assert proc.wait() == 1
    assert "--concurrency must be between 1 and 100000, got 0" in proc.output
    helped = subprocess.run(
        [sys.executable, "-m", "conveyor_cli", "worker", "-h"],
        capture_output=True, text=True, env={"COLUMNS": "300", "PATH": ""}, check=True,
    )  # fmt: skip
    for name in (
        "CONVEYOR_PROCESSES", "CONVEYOR_QUEUES", "CONVEYOR_POOLS", "CONVEYOR_CONCURRENCY", "CONVEYOR_GRACE",
        "CONVEYOR_METRICS_PORT", "CONVEYOR_METRICS_HOST", "CONVEYOR_MAX_TASKS_PER_CHILD",
        "CONVEYOR_MAX_MEMORY_PER_CHILD", "CONVEYOR_LOG_LEVEL", "CONVEYOR_LOG_FORMAT", "CONVEYOR_TASK_LOG",
        "CONVEYOR_RELOAD",
    ):  # fmt: skip
        assert name in helped.stdout, name


def test_a_flag_wins_over_its_variable(
    tmp_path: Path, worker_factory: Factory, server: ServerProcess
) -> None:
    """CONVEYOR_CONCURRENCY=0 alone is refused, but --concurrency 2 on the command line overrides it."""
    (tmp_path / "repapp.py").write_text(APP)
    args = ("--server", server.url, "--processes", "1", "--concurrency", "2")
    proc = worker_factory(tmp_path, "repapp:app", *args, env={"CONVEYOR_CONCURRENCY": "0"})
    proc.wait_for("session ")
    assert "--concurrency must be" not in proc.output


def test_version_and_short_help() -> None:
    """`conveyor --version` prints the version; `conveyor -h` is the help."""
    from conveyor_sdk._version import __version__

    version = subprocess.run(
        [sys.executable, "-m", "conveyor_cli", "--version"], check=False, capture_output=True, text=True
    )
    assert (version.returncode, version.stdout.strip()) == (0, f"conveyor {__version__}")
    helped = subprocess.run(
        [sys.executable, "-m", "conveyor_cli", "-h"], check=False, capture_output=True, text=True
    )
    assert helped.returncode == 0 and "Usage: " in helped.stdout and "worker" in helped.stdout
