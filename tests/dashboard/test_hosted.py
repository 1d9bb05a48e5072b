"""The dashboard served by `conveyor server` (at / and on --dashboard-port) and by `conveyor worker`."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import expect

from conveyor_sdk.client import SyncClient
from conveyor_server_min.testing import ServerProcess
from tests.cli_client._helpers import uid
from tests.runtime._worker_proc import WorkerProc

APP = """
from conveyor_sdk._worker.registry import Registry

app = Registry()

@app.handler("noop", queue="jobs")
def noop(task, ctx):
    return b"ok"
"""


def _read_urls(proc: subprocess.Popen[str]) -> tuple[str, str]:
    assert proc.stdout is not None
    server = dash = ""
    for _ in range(50):
        line = proc.stdout.readline()
        if not line:
            break
        if m := re.match(r"listening on (\S+)", line):
            server = m.group(1)
        if m := re.match(r"dashboard on (\S+?)/? for (\S+)", line):
            dash = m.group(1)
            assert m.group(2) == server
            return server, dash
    raise AssertionError("server did not print both addresses")


def test_server_serves_the_dashboard(page: Any) -> None:
    """`conveyor server --dashboard-port 0` serves the pages in the same process; SIGTERM exits 0."""
    cmd = [sys.executable, "-m", "conveyor_cli", "server", "--dev", "--port", "0", "--dashboard-port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        server, dash = _read_urls(proc)
        assert dash.startswith("http://127.0.0.1:")
        queue = uid("q")
        with SyncClient(server) as client:
            client.enqueue("job", None, queue=queue)
        page.goto(dash + "/")
        expect(page.locator(f'tr[data-queue="{queue}"]')).to_be_visible()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        assert proc.stdout is not None
        proc.stdout.close()


def test_server_serves_the_dashboard_at_its_own_url(
    server_factory: Callable[..., ServerProcess], page: Any
) -> None:
    """The overview opens at the server's own URL (the RPC port) in chromium, and Pause works there."""
    server = server_factory(module="conveyor_cli.server_cmd")  # `conveyor server`: it has the dashboard
    queue = uid("q")
    with SyncClient(server.url) as client:
        client.enqueue("job", None, queue=queue)
        page.goto(server.url + "/")
        row = page.locator(f'tr[data-queue="{queue}"]')
        expect(row).to_be_visible()
        row.locator("button.pause").click()
        expect(row.locator(".queue-status")).to_have_text("paused")
        assert {q.name: q.paused for q in client.admin.list_queues()}[queue] is True


def test_worker_with_embedded_server_prints_dashboard_url(tmp_path: Path) -> None:
    """`conveyor worker` without --server prints a dashboard URL that answers with the overview."""
    (tmp_path / "dashapp.py").write_text(APP)
    proc = WorkerProc(tmp_path, ("dashapp:app", "--processes", "0"), None).start()
    try:
        proc.wait_for("dashboard on ")
        url = proc.output.split("dashboard on ", 1)[1].split()[0]
        server = proc.output.split("embedded server listening on ", 1)[1].split()[0]
        assert url == server + "/"  # the server's own port
        resp = httpx.get(url, timeout=10)
        assert resp.status_code == 200 and "<h1>Queues</h1>" in resp.text
        proc.signal(signal.SIGINT)
        assert proc.wait() == 0
    finally:
        proc.cleanup()
