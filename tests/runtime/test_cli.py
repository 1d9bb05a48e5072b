"""`conveyor worker` command line: exit codes for user mistakes, embedded server, metrics, in-process mode."""

from __future__ import annotations

import os
import signal
import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.errors import NotFound
from conveyor_sdk.types import TaskState
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.runtime._procs import descendants, live_descendants
from tests.runtime._worker_proc import WorkerProc

Factory = Callable[..., WorkerProc]

APP = """
from conveyor_sdk._worker.registry import Registry

app = Registry()

@app.handler("noop", queue="jobs")
def noop(task, ctx):
    return b"ok"

async def demo(client):
    await client.enqueue("noop", b"", queue="jobs", task_id="01DEMO0000000000000000000A", retention=300)
"""


def _app(tmp_path: Path, source: str = APP) -> Path:
    (tmp_path / "rtapp.py").write_text(source)
    return tmp_path


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["nosuchmodule:app"], 3, "cannot import app module 'nosuchmodule'"),
        (["rtapp:nope"], 4, "has no attribute 'nope'"),
        (["rtapp:VALUE"], 4, "not an App or Registry"),
        (["twoapps"], 4, "several apps"),
        (["rtapp:app", "-q", "bad name=1"], 1, "invalid queue name"),
        (["rtapp:app", "-q", "jobs=0"], 1, "weight must be > 0"),
        (["rtapp:app", "--concurrency", "0"], 1, "--concurrency must be between 1 and 100000, got 0"),
        (["rtapp:app", "--pool", "x:jobs"], 1, "expected NAME:QUEUES:N"),
        (["rtapp:app", "--log-format", "xml"], 1, "text or json"),
        (["rtapp:app", "--log-level", "loud"], 1, "--log-level must be one of debug, info, warning, error"),
        (
            ["rtapp:app", "--metrics-port", "99999"],
            1,
            "--metrics-port must be between 0 and 65535, got 99999",
        ),
        (["rtapp:app", "--metrics-port", "-1"], 1, "--metrics-port must be between 0 and 65535"),
        (["rtapp:app", "--processes", "-1"], 1, "--processes must be between 0 and 1024, got -1"),
        (["rtapp:app", "--processes", "5000"], 1, "--processes must be between 0 and 1024"),
        (["rtapp:app", "--concurrency", "1000001"], 1, "--concurrency must be between 1 and 100000"),
        (["rtapp:app", "--max-tasks-per-child", "-1"], 1, "--max-tasks-per-child must be >= 0"),
        (["rtapp:app", "--max-memory-per-child", "-5"], 1, "--max-memory-per-child must be >= 0"),
        (["rtapp:app", "--processes", "many"], 2, "error: Invalid value for '--processes'"),
        (["rtapp:app", "--bogus"], 2, "error: No such option: --bogus"),
    ],
)
def test_user_mistakes_exit_with_documented_codes(
    tmp_path: Path, worker_factory: Factory, args: list[str], code: int, message: str
) -> None:
    """Each mistake prints one error line (no traceback), exits with its code and never connects."""
    _app(tmp_path, APP + "\nVALUE = 3\n")
    (tmp_path / "broken.py").write_text("1 / 0\n")
    (tmp_path / "twoapps.py").write_text(
        "from conveyor_sdk._worker.registry import Registry\na = Registry()\nb = Registry()\n"
    )
    proc = worker_factory(tmp_path, *args, "--server", "http://127.0.0.1:9")
    assert proc.wait(60) == code
    assert message in proc.output
    assert "Traceback" not in proc.output
    assert "connecting" not in proc.output
    assert [line for line in proc.output.splitlines() if line.strip()] == [
        next(line for line in proc.output.splitlines() if line.startswith("error: "))
    ]  # one line, in the one style every command uses


def test_metrics_port_in_use_is_one_error_line(tmp_path: Path, worker_factory: Factory) -> None:
    """A --metrics-port in use by another socket: one `error:` line (EADDRINUSE), exit 1, nothing started."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = worker_factory(
            _app(tmp_path), "rtapp:app", "--server", "http://127.0.0.1:9", "--metrics-port", str(port)
        )
        assert proc.wait(60) == 1
    assert (
        proc.output.strip()
        == f"error: --metrics-port {port}: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
    assert "child processes" not in proc.output


def test_import_error_shows_the_user_frames_then_exits_3(tmp_path: Path, worker_factory: Factory) -> None:
    """An app raising KeyError at import: its traceback (user frames only), then `error: ...`, exit 3."""
    (tmp_path / "settings.py").write_text(
        "import os\n\n\ndef database_url():\n    return os.environ['DATABASE_URL']\n"
    )
    (tmp_path / "shop.py").write_text("import settings\n\nURL = settings.database_url()\n")
    assert "DATABASE_URL" not in os.environ
    proc = worker_factory(tmp_path, "shop:app", "--server", "http://127.0.0.1:9")
    assert proc.wait(60) == 3
    out = proc.output
    assert "Traceback (most recent call last):" in out
    assert 'shop.py", line 3, in <module>' in out and 'settings.py", line 5, in database_url' in out
    assert "importlib" not in out and "conveyor_sdk" not in out
    assert (
        out.rstrip().splitlines()[-1] == "error: importing app module 'shop' failed: KeyError: 'DATABASE_URL'"
    )


def test_embedded_server_demo_runs_tasks_and_exits_cleanly(tmp_path: Path, worker_factory: Factory) -> None:
    """No --server: an embedded server starts, --demo enqueues, the task completes, SIGINT exits 0."""
    proc = worker_factory(_app(tmp_path), "rtapp", "--demo", "--processes", "1")
    proc.wait_for("embedded server listening on ")
    url = proc.output.split("embedded server listening on ", 1)[1].split()[0]
    with SyncClient(url) as client:

        def completed() -> bool:
            try:
                return client.get_task("01DEMO0000000000000000000A").state is TaskState.COMPLETED
            except NotFound:
                return False  # the demo producer has not enqueued it yet

        wait_until(completed, timeout=30, what="the demo task to complete")
    proc.signal(signal.SIGINT)
    assert proc.wait() == 0


def test_metrics_and_healthz(tmp_path: Path, server: ServerProcess, worker_factory: Factory) -> None:
    """--metrics-port serves Prometheus text with task counters and a 200 /healthz."""
    proc = worker_factory(
        _app(tmp_path), "rtapp:app", "--server", server.url, "--processes", "1", "--metrics-port", "0"
    )
    proc.wait_for("established")
    base = proc.output.split("metrics listening on ", 1)[1].split()[0]
    with SyncClient(server.url) as client:
        for _ in range(3):
            client.enqueue("noop", b"", queue="jobs")

    def scraped() -> str:
        with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
            body: str = resp.read().decode()
        return body if 'conveyor_tasks_total{type="noop",queue="jobs",outcome="success"} 3' in body else ""

    body = wait_until(scraped, timeout=30, what="3 successes in /metrics")
    assert "# TYPE conveyor_task_duration_seconds histogram" in body
    assert 'conveyor_child_restarts_total{reason="crashed"} 0' in body
    with urllib.request.urlopen(base + "/healthz", timeout=5) as resp:
        assert (resp.status, resp.read()) == (200, b"ok\n")
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_processes_zero_runs_in_process(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """--processes 0 uses the worker core's in-process executor: tasks complete, no child spawned."""
    proc = worker_factory(_app(tmp_path), "rtapp:app", "--server", server.url, "--processes", "0")
    proc.wait_for("established")
    assert "child processes" not in proc.output
    with SyncClient(server.url) as client:
        info = client.enqueue("noop", b"", queue="jobs", retention=300)
        wait_until(lambda: client.get_task(info.id).state is TaskState.COMPLETED, timeout=30)
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_children_failing_to_import_stop_the_runtime(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """An app that imports in the supervisor but not in children exits 5 with the error, no respawn storm."""
    source = (
        "import os\nif os.environ.get('CONVEYOR_CHILD_TEST') and os.getppid() != int(os.environ['SUP']):\n"
    )
    source = APP + (
        "\nimport __main__\n"
        "if getattr(__main__.__spec__, 'name', '') == 'conveyor_sdk._runtime.child':\n"
        "    raise ImportError('only the supervisor can import me')\n"
    )
    proc = worker_factory(_app(tmp_path, source), "rtapp:app", "--server", server.url, "--processes", "2")
    assert proc.wait(60) == 5
    assert "only the supervisor can import me" in proc.output


def test_sigkill_of_the_supervisor_leaves_no_process_behind(tmp_path: Path, worker_factory: Factory) -> None:
    """kill -9 of the supervisor: its children and the embedded server exit on their own."""
    proc = worker_factory(_app(tmp_path), "rtapp:app", "--processes", "2")
    proc.wait_for("established")
    assert proc.proc is not None
    kids = descendants(proc.proc.pid)
    assert len(kids) >= 3  # two children + the embedded server
    proc.signal(signal.SIGKILL)
    proc.wait()
    wait_until(lambda: not [d for d in live_descendants() if d[0] in {k[0] for k in kids}], timeout=20)


def test_readme_example_runs_with_demo(worker_factory: Factory) -> None:
    """`conveyor worker examples.hello:app --demo` starts an embedded server and tasks flow."""
    repo = Path(__file__).resolve().parents[2]
    proc = worker_factory(repo, "examples.hello:app", "--demo", "--processes", "1", "--metrics-port", "0")
    proc.wait_for("metrics listening on ")
    base = proc.output.split("metrics listening on ", 1)[1].split()[0]

    def greeted() -> bool:
        with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
            body = resp.read().decode()
        return 'type="hello:greet",queue="default",outcome="success"' in body and "hello:digest" in body

    wait_until(greeted, timeout=30, what="demo tasks to succeed")
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_fatal_session_error_exits_6_without_reconnecting(
    tmp_path: Path, server_factory: Callable[..., ServerProcess], worker_factory: Factory
) -> None:
    """A server requiring a token the worker lacks: unauthenticated is fatal, exit code 6."""
    secured = server_factory(["--token", "s3cret"])
    proc = worker_factory(_app(tmp_path), "rtapp:app", "--server", secured.url, "--processes", "1")
    assert proc.wait(60) == 6
    assert "unauthenticated" in proc.output
    assert proc.output.count("connecting to") == 1
