"""Every command reports a mistake in one style: one `error: ...` line, non-zero exit, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["enqueue", "x", "-p", "0"], 1, "--priority must be between 1 and 9, got 0"),
        (["enqueue", "x", "--priority", "10"], 1, "--priority must be between 1 and 9, got 10"),
        (["enqueue", "x", "--max-retry", "-1"], 1, "--max-retry must be >= 0, got -1"),
        (["tasks", "ls", "-n", "0"], 1, "--limit must be between 1 and 1000, got 0"),
        (["tasks", "ls", "-n", "1001"], 1, "--limit must be between 1 and 1000, got 1001"),
        (["enqueue-batch", "-f", "-", "--chunk-size", "0"], 1, "--chunk-size must be between 1 and 1000"),
        (["tasks", "ls", "-n", "many"], 2, "Invalid value for '--limit' / '-n'"),
        (["tasks", "ls", "--bogus"], 2, "No such option: --bogus"),
        (["server", "--bogus"], 2, "No such option: --bogus"),
        (["conformance", "run", "--timing-scale", "0"], 2, "Invalid value for '--timing-scale'"),
    ],
)
def test_out_of_range_and_unknown_options_are_one_error_line(
    args: list[str], code: int, message: str
) -> None:
    """Values outside their documented range exit 1, usage errors exit 2; both as one `error:` line."""
    done = _run("conveyor_cli", *args)
    assert done.returncode == code, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert message in lines[0]
    assert "Error" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["conveyor_cli", "server"],
        ["conveyor_cli", "server", "--dev", "--port", "99999"],
        ["conveyor_server_min", "--bogus"],
    ],
)
def test_server_errors_use_the_same_prefix(args: list[str]) -> None:
    """`conveyor server` (and python -m conveyor_server_min) print `error:` like every other command."""
    done = _run(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: "), done.stderr
    assert "Error" not in done.stderr
