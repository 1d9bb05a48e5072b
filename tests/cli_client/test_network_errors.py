"""Errors from the network in words: server down, untrusted certificate, --ca-file; a worker whose
server certificate does not verify stops with one line and exit code 6 instead of retrying forever."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_server_min.testing import ServerProcess
from tests.runtime._worker_proc import WorkerProc
from tests.sdk_transport._helpers import make_certs

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def _conveyor(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["CONVEYOR_EMBEDDED_PORT"] = "0"
    return subprocess.run(
        [sys.executable, "-m", "conveyor_cli", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False,
    )  # fmt: skip


def _one_line(done: subprocess.CompletedProcess[str], code: int, *parts: str) -> str:
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert done.returncode == code, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


def test_server_down_names_the_address_and_what_to_check() -> None:
    """A refused connection: `cannot reach the server at <url> (connection refused ...); check --server`."""
    with socket.socket() as closed:  # bound, never listening: connecting is refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        done = _conveyor("enqueue", "x", "--server", url)
    line = _one_line(
        done, 1, f"cannot reach the server at {url}", "connection refused", "--server / CONVEYOR_ADDR"
    )
    assert "os error" not in line


@needs_openssl
def test_untrusted_certificate_says_ca_file_and_ca_file_fixes_it(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """https:// with a private CA: one line naming --ca-file; `conveyor --ca-file CA enqueue` then works."""
    certs = make_certs(tmp_path)
    server = server_factory(
        ["--dev", "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    )
    done = _conveyor("enqueue", "x", "--server", server.url)
    _one_line(done, 1, f"the TLS certificate of {server.url} does not verify", "--ca-file / CONVEYOR_CA_FILE")
    ok = _conveyor("--ca-file", str(certs.ca), "enqueue", "x", "--server", server.url, "-o", "json")
    assert ok.returncode == 0, ok.stderr
    assert '"type": "x"' in ok.stdout


APP = """
from conveyor_sdk.app import App

app = App(tracing=False)

@app.task("noop")
def noop(payload: dict, ctx) -> None:
    return None
"""


@needs_openssl
def test_worker_with_an_unverified_certificate_stops_with_exit_6(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """An https server it cannot verify: exit 6, a line naming --ca-file; with CONVEYOR_CA_FILE it joins."""
    certs = make_certs(tmp_path)
    server = server_factory(
        ["--dev", "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    )
    (tmp_path / "tlsapp.py").write_text(APP)
    done = _conveyor("worker", "tlsapp:app", "--server", server.url, "--processes", "0", cwd=tmp_path)
    assert done.returncode == 6, done.stderr
    assert f"the TLS certificate of {server.url} does not verify" in done.stderr
    assert "--ca-file / CONVEYOR_CA_FILE" in done.stderr
    assert "reconnecting to" not in done.stderr  # every reconnect wait logs "reconnecting to ADDR in"
    joined = WorkerProc(tmp_path, ["tlsapp:app", "--server", server.url, "--processes", "0"],
                        env={"CONVEYOR_CA_FILE": str(certs.ca)}).start()  # fmt: skip
    try:
        joined.wait_for("established")
        joined.signal(signal.SIGTERM)
        assert joined.wait() == 0
    finally:
        joined.cleanup()


@needs_openssl
def test_dashboard_reaches_an_https_server_with_ca_file(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """conveyor dashboard with CONVEYOR_CA_FILE reads an https server; without it the page says it cannot."""
    import urllib.error
    import urllib.request

    from tests.dashboard.conftest import DashboardProcess

    certs = make_certs(tmp_path)
    server = server_factory(
        ["--dev", "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    )
    pages = []
    for env in ({"CONVEYOR_CA_FILE": str(certs.ca)}, {"CONVEYOR_CA_FILE": ""}):
        board = DashboardProcess(server.url, env=env)
        try:
            try:
                with urllib.request.urlopen(board.url + "/", timeout=30) as resp:
                    pages.append(f"{resp.status} {resp.read().decode()}")
            except urllib.error.HTTPError as exc:  # the banner page comes with a 503
                pages.append(f"{exc.code} {exc.read().decode()}")
        finally:
            assert board.stop() == 0
    trusted, untrusted = pages
    assert trusted.startswith("200 ") and "Cannot reach the Conveyor server" not in trusted
    assert untrusted.startswith("503 ") and "Cannot reach the Conveyor server" in untrusted
