"""`conveyor worker` over a blackholed link: /readyz tells the truth, SIGTERM ends a stuck write in bound."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.testing.faultproxy import SyncFaultProxy
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.runtime._worker_proc import WorkerProc

pytestmark = pytest.mark.slow

APP = """
import asyncio, os, pathlib
from conveyor_sdk._worker.registry import Registry

app = Registry()
GATE = pathlib.Path(os.environ["RT_GATE"])


@app.handler("big")
async def big(task, ctx):
    print(f"STARTED {task.id}", flush=True)
    while not GATE.exists():  # the test's go-ahead
        await asyncio.sleep(0.01)
    return b"x" * (2 << 20)  # more than the server's flow-control window
"""

FAST = ("--keepalive-interval", "300ms", "--keepalive-timeout", "700ms")
BOUND = 0.3 + 0.7
Factory = Callable[..., WorkerProc]
ROOT = Path(__file__).resolve().parents[2]


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _start(factory: Factory, folder: Path, url: str, *args: str, **env: str) -> WorkerProc:
    (folder / "rtapp.py").write_text(APP)
    env["RT_GATE"] = str(folder / "go")
    return factory(folder, "rtapp:app", "--server", url, *args, env=env)


def test_readyz_follows_a_blackhole_and_its_heal(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """/readyz: 503 'server unreachable' within the keepalive bound of a blackhole, 200 after the heal;
    /healthz stays 200 throughout. The keepalive comes from its CONVEYOR_* variables here."""
    with SyncFaultProxy(server.url.removeprefix("http://")) as proxy:
        args = ("--processes", "0", "--metrics-port", "0")
        pings = {"CONVEYOR_KEEPALIVE_INTERVAL": "300ms", "CONVEYOR_KEEPALIVE_TIMEOUT": "700ms"}
        worker = _start(worker_factory, tmp_path, proxy.url, *args, **pings)
        worker.wait_for("/readyz")
        found = re.search(r"http://127\.0\.0\.1:(\d+) \(/metrics", worker.output)
        assert found, worker.output
        port = int(found.group(1))
        wait_until(lambda: _get(port, "/readyz") == (200, "ok\n"), timeout=30, what="readyz 200")
        proxy.blackhole("both")
        started = time.monotonic()
        reply = wait_until(
            lambda: (r := _get(port, "/readyz"))[0] == 503 and r, timeout=15, what="readyz 503"
        )
        took = time.monotonic() - started
        assert "server unreachable" in reply[1] and "PING" in reply[1], reply
        assert took <= BOUND + 1.0, took
        assert _get(port, "/healthz") == (200, "ok\n")
        proxy.heal()
        wait_until(lambda: _get(port, "/readyz") == (200, "ok\n"), timeout=15, what="readyz 200 again")
        assert _get(port, "/healthz") == (200, "ok\n")
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0


@pytest.mark.parametrize(
    ("signals", "keepalive", "bound"),
    [
        # defaults (10 s keepalive timeout): the second signal does not wait for it. The bound stays under
        # those 10 s with room for a loaded machine (it took 1-3 s idle, 5.03 s once at load 20).
        (2, (), 8.0),
        (1, FAST, BOUND + 4.0),  # one signal: the drain ends once the keepalive gives the link up
    ],
)
def test_sigterm_ends_the_runtime_while_a_big_result_is_stuck(
    tmp_path: Path,
    server: ServerProcess,
    worker_factory: Factory,
    *,
    signals: int,
    keepalive: tuple[str, ...],
    bound: float,
) -> None:
    """--processes 1, a 2 MiB Result behind a stalled link: SIGTERM (twice, or once with a short
    keepalive) ends the runtime with exit 0 within its bound."""
    with SyncFaultProxy(server.url.removeprefix("http://")) as proxy:
        worker = _start(worker_factory, tmp_path, proxy.url, "--processes", "1", *keepalive)
        worker.wait_for("established")
        with SyncClient(server.url) as client:
            info = client.enqueue("big", b"", retention=3600)
        worker.wait_for(f"STARTED {info.id}")
        proxy.blackhole("both", mode="stall")
        (tmp_path / "go").touch()
        worker.wait_for(f"task {info.id} (big) succeeded")
        for count in range(1, signals + 1):
            worker.signal(signal.SIGTERM)
            worker.wait_for("SIGTERM again" if count > 1 else "SIGTERM: draining")
        started = time.monotonic()
        code = worker.wait(bound + 10)
        took = time.monotonic() - started
        assert code == 0, worker.output
        assert took <= bound, (took, worker.output)


def test_bad_keepalive_options_are_one_line_errors() -> None:
    """--keepalive-interval/-timeout (flag or CONVEYOR_* variable): 0 or not a duration: one line, exit 1."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    one = ["--server", "http://127.0.0.1:1"]
    cases = [
        ([*one, "--keepalive-timeout", "0s"], {}, "keepalive timeout must be a positive"),
        ([*one, "--keepalive-interval", "soon"], {}, "--keepalive-interval"),
        (one, {"CONVEYOR_KEEPALIVE_INTERVAL": "0"}, "keepalive interval must be a positive"),
    ]
    for args, extra, part in cases:
        done = subprocess.run(
            [sys.executable, "-m", "conveyor_cli", "worker", "examples.hello:app", *args],
            capture_output=True, text=True, env={**env, **extra}, timeout=60, check=False, cwd=ROOT,
        )  # fmt: skip
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
        assert done.returncode == 1 and len(lines) == 1 and part in lines[0], done.stderr
        assert "Traceback" not in done.stderr
