"""`conveyor worker --embedded-db`: the embedded server's queue survives a restart of the worker."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import TaskState
from tests._util import wait_until
from tests.runtime._worker_proc import WorkerProc

Factory = Callable[..., WorkerProc]

APP = """
from conveyor_sdk._worker.registry import Registry

app = Registry()

@app.handler("noop", queue="jobs")
def noop(task, ctx):
    return b"ok"
"""
TASK_ID = "01KEEP0000000000000000000A"


def _url(proc: WorkerProc) -> str:
    proc.wait_for("embedded server listening on ")
    return proc.output.split("embedded server listening on ", 1)[1].split()[0]


def test_task_enqueued_before_a_worker_restart_runs_after_it(tmp_path: Path, worker_factory: Factory) -> None:
    """A task scheduled in the first run is kept in the file and completed by the second run."""
    (tmp_path / "dbapp.py").write_text(APP)
    db = str(tmp_path / "dev.db")
    first = worker_factory(tmp_path, "dbapp:app", "--processes", "0", "--embedded-db", db)
    with SyncClient(_url(first)) as client:
        client.enqueue("noop", b"", queue="jobs", task_id=TASK_ID, retention=300, process_in=600)
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    second = worker_factory(tmp_path, "dbapp:app", "--processes", "0", "--embedded-db", db)
    with SyncClient(_url(second)) as client:
        assert client.get_task(TASK_ID).state is TaskState.SCHEDULED
        client.admin.run_task(TASK_ID)  # due now
        wait_until(lambda: client.get_task(TASK_ID).state is TaskState.COMPLETED, timeout=30)
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


def test_embedded_db_with_server_is_a_usage_error(tmp_path: Path, worker_factory: Factory) -> None:
    """--embedded-db next to --server is refused with one line and exit 1."""
    (tmp_path / "dbapp.py").write_text(APP)
    proc = worker_factory(tmp_path, "dbapp:app", "--server", "http://127.0.0.1:9", "--embedded-db", "x.db")
    assert proc.wait(60) == 1
    assert "--embedded-db configures the embedded server" in proc.output
    assert "Traceback" not in proc.output
