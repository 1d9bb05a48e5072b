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
    assert "reconnecting in" not in done.stderr
    joined = WorkerProc(tmp_path, ["tlsapp:app", "--server", server.url, "--processes", "0"],
                        env={"CONVEYOR_CA_FILE": str(certs.ca)}).start()  # fmt: skip
    try:
        joined.wait_for("established")
        joined.signal(signal.SIGTERM)
        assert joined.wait() == 0
    finally:
        joined.cleanup()
