"""`conveyor conformance` on the command line: exit codes, reports, list and the worker program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from conveyor_server_min.testing import ServerProcess
from tests.sdk_transport._helpers import make_certs

CLI = [sys.executable, "-c", "from conveyor_cli.app import main; main()", "conformance"]


def _run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 110
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def test_run_writes_reports_and_exits_zero(tmp_path: Path) -> None:
    """A passing selection exits 0, prints the table and writes JSON and JUnit reports."""
    out = _run(
        "run", "--only", "server.6.2", "--only", "server.5.3.welcome-fields",
        "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "r.xml"),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "server.6.2.get-task-errors" in out.stdout and "2 passed" in out.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["ok"] is True and {r["id"] for r in report["results"]} == {
        "server.6.2.get-task-errors",
        "server.5.3.welcome-fields",
    }
    suite = ET.parse(tmp_path / "r.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "2" and suite.get("failures") == "0"


def test_failing_run_exits_one() -> None:
    """A failing check makes the run exit 1 (here: a worker program that accepts a bad Hello)."""
    env = {**os.environ, "MUTATION": "accept-bad-hello"}
    cmd = f"{sys.executable} -m conveyor_conformance.mutants.raw_worker"
    out = _run("run", "--only", "worker.5.2", "--worker-cmd", cmd, env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "fail" in out.stdout and "exit code 2" in out.stdout


def test_usage_errors_exit_two() -> None:
    """An --only pattern matching nothing and a bad --profile are one-line usage errors (exit 2)."""
    out = _run("run", "--only", "server.99.nothing")
    assert out.returncode == 2 and "no check matches" in out.stderr and "Traceback" not in out.stderr
    out = _run("run", "--profile", "lenient")
    assert out.returncode == 2 and "--profile" in out.stderr
    out = _run("run", "--worker-declares", "CONCURRENCY,conformance:bogus")
    assert out.returncode == 2 and "unknown extension(s) conformance:bogus" in out.stderr


def test_worker_declares_flag_replaces_the_declaration_line() -> None:
    """--worker-declares none makes extension-bound checks n/a even when the program declares them."""
    out = _run("run", "--only", "sdk.9.outcome-mapping", "--worker-declares", "none")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "n/a" in out.stdout and "conformance:skip" in out.stdout


def test_list_shows_every_check() -> None:
    """`conformance list` names every registered check with its section."""
    from conveyor_conformance import default_registry

    out = _run("list")
    assert out.returncode == 0
    assert f"{len(default_registry())} checks" in out.stdout


def test_worker_program_needs_its_environment() -> None:
    """`conformance worker` without CONVEYOR_ADDR exits 2 with a one-line error; bad-hello exits 1."""
    env = {k: v for k, v in os.environ.items() if k != "CONVEYOR_ADDR"}
    out = _run("worker", env=env)
    assert out.returncode == 2 and "CONVEYOR_ADDR" in out.stderr
    env.update({"CONVEYOR_ADDR": "http://127.0.0.1:1", "SCENARIO": "bad-hello", "QUEUE": "q"})
    out = _run("worker", env=env)
    assert out.returncode == 1, out.stderr


def test_ca_file_verifies_an_https_server_under_test(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """Against https:// with a private CA: checks fail without it, pass with --ca-file or CONVEYOR_CA_FILE."""
    certs = make_certs(tmp_path)
    server = server_factory(
        ["--dev", "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    )
    only = ("--only", "server.6.2", "--only", "server.5.3.welcome-fields", "--server", server.url)
    without = _run("run", *only)
    assert without.returncode == 1, without.stdout + without.stderr
    with_flag = _run("run", *only, "--ca-file", str(certs.ca))
    assert with_flag.returncode == 0, with_flag.stdout + with_flag.stderr
    assert "2 passed" in with_flag.stdout
    with_env = _run("run", *only, env={**os.environ, "CONVEYOR_CA_FILE": str(certs.ca)})
    assert with_env.returncode == 0, with_env.stdout + with_env.stderr
    missing = _run("run", *only, "--ca-file", str(tmp_path / "nope.pem"))
    assert missing.returncode == 2 and "--ca-file" in missing.stderr


def test_worker_program_takes_the_ca_file_from_its_environment(tmp_path: Path) -> None:
    """The suite hands CONVEYOR_CA_FILE to the worker program, which builds its Worker with that CA."""
    from conveyor_conformance.worker_program import _worker

    env = {"CONVEYOR_ADDR": "https://127.0.0.1:1", "CONVEYOR_CA_FILE": str(tmp_path / "ca.pem")}
    worker = _worker(env, {"q": 1})
    assert worker.tls is not None and worker.tls.ca_file == str(tmp_path / "ca.pem")
    assert _worker({"CONVEYOR_ADDR": "http://127.0.0.1:1"}, {"q": 1}).tls is None
