"""Output a person can debug from: handler output above the live view, tagged; failures with tracebacks."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import RetryPolicy, TaskState
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.runtime._term import Screen
from tests.runtime._worker_proc import WorkerProc

pytestmark = pytest.mark.slow
Factory = Callable[..., WorkerProc]

APP = """
import logging, os, sys, warnings
from conveyor_sdk._worker.registry import Registry

app = Registry()
log = logging.getLogger("shop")


@app.handler("talk")
def talk(task, ctx):
    print(f"printed-{task.id}")
    log.info("logged-%s", task.id)
    log.warning("warned-by-logging-%s", task.id)
    warnings.warn(f"warned-by-warnings-{task.id}")
    sys.stderr.write(f"stderr-{task.id}\\n")
    os.write(2, f"raw-fd-{task.id}\\n".encode())


@app.handler("talk-async")
async def talk_async(task, ctx):
    print(f"printed-{task.id}")


def _lookup(table):
    return table["missing"]


@app.handler("fail")
def fail(task, ctx):
    _lookup({})
"""
FAST = RetryPolicy(base=0.05, max=0.1)


class PtyWorker:
    """`conveyor worker` on a pseudo-terminal (400x50, so no log line wraps), its output collected."""

    def __init__(self, folder: Path, *args: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 400, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("CONVEYOR_ADDR", "COLUMNS", "LINES")}
        env.update(TERM="xterm-256color", PYTHONUNBUFFERED="1", CONVEYOR_EMBEDDED_PORT="0")
        env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "conveyor_cli", "worker", *args],
            cwd=folder, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
        )  # fmt: skip
        os.close(slave)
        self.master = master
        self.raw = bytearray()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.raw += chunk

    @property
    def text(self) -> str:
        return self.raw.decode(errors="replace")

    def screen(self) -> list[str]:
        screen = Screen()
        screen.feed(self.text)
        return screen.lines()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(60)
        self.reader.join(10)
        os.close(self.master)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def pty_worker(tmp_path: Path, server: ServerProcess) -> PtyWorker:
    (tmp_path / "rtapp.py").write_text(APP)
    worker = PtyWorker(tmp_path, "rtapp:app", "--server", server.url, "--processes", "2")
    yield worker
    worker.kill()


def test_handler_output_scrolls_above_the_live_view_tagged_and_complete(
    pty_worker: PtyWorker, server: ServerProcess
) -> None:
    """On a TTY: print, logging, warnings, sys.stderr and raw fd 2 of every task all show once, tagged."""
    wait_until(lambda: "established" in pty_worker.text, timeout=60, what="the session")
    with SyncClient(server.url) as client:
        ids = [client.enqueue("talk", b"", retention=300).id for _ in range(6)]
        ids.append(client.enqueue("talk-async", b"", retention=300).id)
        for task_id in ids:
            wait_until(lambda t=task_id: client.get_task(t).state is TaskState.COMPLETED, timeout=60)
    wait_until(lambda: all(f"raw-fd-{t}" in pty_worker.text for t in ids[:-1]), timeout=30, what="raw output")
    assert pty_worker.stop() == 0
    lines = pty_worker.screen()
    for task_id in ids[:-1]:
        for what, logger in [
            ("printed", "conveyor.stdout"),
            ("logged", "shop"),
            ("warned-by-logging", "shop"),
            ("warned-by-warnings", "py.warnings"),
            ("stderr", "conveyor.stderr"),
        ]:
            found = [ln for ln in lines if f"{what}-{task_id}" in ln]
            assert len(found) == 1, (what, task_id, found)
            assert f" {task_id}] {logger}: " in found[0] and "[default-" in found[0], found[0]
        [raw] = [ln for ln in lines if f"raw-fd-{task_id}" in ln]
        assert raw.startswith("[default-"), raw  # written to fd 2 directly: tagged with its child
    [async_print] = [ln for ln in lines if f"printed-{ids[-1]}" in ln]
    assert f" {ids[-1]}] conveyor.stdout: " in async_print
    assert sum("conveyor worker rtapp:app" in ln for ln in lines) == 1, "\n".join(lines)


def test_failures_under_the_live_view_show_the_traceback_once(
    pty_worker: PtyWorker, server: ServerProcess
) -> None:
    """A failing task on a TTY: `retry 1/1` then `archived after 2 attempts`, each with the traceback."""
    wait_until(lambda: "established" in pty_worker.text, timeout=60, what="the session")
    with SyncClient(server.url) as client:
        info = client.enqueue("fail", b"", max_retry=1, retry_policy=FAST, retention=300)
        wait_until(lambda: client.get_task(info.id).state is TaskState.ARCHIVED, timeout=60)
    wait_until(lambda: "archived after 2 attempts" in pty_worker.text, timeout=30, what="the archive line")
    assert pty_worker.stop() == 0
    lines = pty_worker.screen()
    heads = [ln for ln in lines if f"task {info.id} (fail) failed" in ln]
    assert len(heads) == 2 and "retry 1/1: KeyError: 'missing' (at rtapp.py:" in heads[0], heads
    assert "archived after 2 attempts: KeyError: 'missing'" in heads[1]
    assert sum('rtapp.py", line 25, in _lookup' in ln for ln in lines) == 2, "\n".join(lines)


def test_failure_records_in_json_carry_the_traceback_and_the_fate(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """--log-format json: the failure record has task_id, the fate in msg and the traceback in `exc`."""
    (tmp_path / "rtapp.py").write_text(APP)
    worker = worker_factory(tmp_path, "rtapp:app", "--server", server.url, "--processes", "1",
                            "--log-format", "json")  # fmt: skip
    worker.wait_for("established")
    with SyncClient(server.url) as client:
        info = client.enqueue("fail", b"", max_retry=1, retry_policy=FAST, retention=300)
        done = wait_until(
            lambda: (i := client.get_task(info.id)).state is TaskState.ARCHIVED and i, timeout=60
        )
    assert "KeyError: 'missing' (at rtapp.py:25 in _lookup)" in done.last_error
    worker.wait_for("archived after 2 attempts")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    records = [json.loads(line) for line in worker.lines if line.startswith("{")]
    fails = [r for r in records if r["task_id"] == info.id and "failed" in r["msg"]]
    assert [r["level"] for r in fails] == ["warning", "error"]
    assert all('rtapp.py", line 25, in _lookup' in r["exc"] for r in fails)
    assert "session closed: this worker drained and ended it" in worker.output
    assert "session ended by the server" not in worker.output


def test_log_level_warning_hides_info_lines(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """--log-level warning: no info lines from the supervisor or the children; warnings still show."""
    (tmp_path / "rtapp.py").write_text(APP)
    worker = worker_factory(tmp_path, "rtapp:app", "--server", server.url, "--processes", "1",
                            "--log-level", "warning")  # fmt: skip
    with SyncClient(server.url) as client:
        info = client.enqueue("talk", b"", retention=300)
        wait_until(lambda: client.get_task(info.id).state is TaskState.COMPLETED, timeout=60)
    worker.wait_for(f"warned-by-logging-{info.id}")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert f"logged-{info.id}" not in worker.output and f"printed-{info.id}" not in worker.output
    assert " INFO " not in worker.output and "established" not in worker.output
