"""``--server a,b`` and ``CONVEYOR_ADDR=a,b``: commands fail over past a dead node; bad lists are one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from typer.testing import CliRunner

from conveyor_cli.app import app
from tests.cli_client._helpers import assert_one_line_error, run, run_json


def _dead() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_env_list_with_a_dead_first_node_reaches_the_live_one(url: str) -> None:
    """CONVEYOR_ADDR=dead,live: enqueue and get both succeed (the dead node refuses connections)."""
    task = run_json(f"{_dead()},{url}", "enqueue", "addr:t")
    assert run_json(f"{_dead()}, {url}", "tasks", "get", task["id"])["id"] == task["id"]


def test_server_flag_list(url: str) -> None:
    """--server dead,live works like the environment variable."""
    env = {"CONVEYOR_ADDR": "", "CONVEYOR_TOKEN": ""}
    result = CliRunner().invoke(app, ["queues", "ls", "--server", f"{_dead()},{url}"], env=env)
    assert result.exit_code == 0, result.stderr


def test_bad_lists_are_one_line_errors(url: str) -> None:
    """An empty entry or a URL without scheme: exit 1, one line naming it."""
    assert_one_line_error(run(f"{url},,", "queues", "ls"), "#2")
    assert_one_line_error(run(f"{url},localhost:1", "queues", "ls"), "'localhost:1'")


def test_worker_rejects_a_bad_list_and_bad_reconnect_options() -> None:
    """conveyor worker: a bad --server entry, or a reconnect cap below the base (flag or env), exits 1."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    one = ["--server", "http://127.0.0.1:1"]
    cases = [
        (["--server", "http://127.0.0.1:1,nope"], "'nope'"),
        ([*one, "--reconnect-base", "2s", "--reconnect-max", "1s"], "reconnect max"),
        ([*one, "--reconnect-base", "soon"], "--reconnect-base"),
    ]
    for args, part in cases:
        done = subprocess.run(
            [sys.executable, "-m", "conveyor_cli", "worker", "examples.hello:app", *args],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
        assert done.returncode == 1 and len(lines) == 1 and part in lines[0], done.stderr
        assert "Traceback" not in done.stderr
    env["CONVEYOR_RECONNECT_MAX"] = "100ms"  # below the default base: the variable is read
    done = subprocess.run(
        [sys.executable, "-m", "conveyor_cli", "worker", "examples.hello:app", *one],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "reconnect max (0.1s)" in done.stderr, done.stderr
