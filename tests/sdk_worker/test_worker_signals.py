"""run_sync in a real subprocess: SIGTERM drains (retried stays 0), a second SIGTERM releases at once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conveyor_sdk.client import Client
from conveyor_sdk.types import TaskState
from tests.sdk_worker._helpers import KEEP, wait_state

ROOT = Path(__file__).resolve().parents[2]


def _spawn(url: str, grace: float, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.sdk_worker._signal_worker", url, str(grace), str(seconds)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _read_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 30.0) -> str:
    """Blocking read of stdout until a line with ``prefix`` (the child prints few lines)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"child never printed {prefix!r}")


@pytest.mark.parametrize(
    ("grace", "seconds", "signals", "state"),
    [
        (30.0, 1.5, 1, TaskState.COMPLETED),  # finishes within grace: real outcome
        (0.3, 60.0, 1, TaskState.PENDING),  # grace ends first: RELEASED
        (30.0, 60.0, 2, TaskState.PENDING),  # second signal: released at once
    ],
)
def test_sigterm_mid_task_keeps_retried_zero(
    server_url: str, grace: float, seconds: float, signals: int, state: TaskState
) -> None:
    """SIGTERM while a task runs: the process exits 0, the task ends in ``state`` with retried 0."""

    async def enqueue() -> str:
        async with Client(server_url) as client:
            return (await client.enqueue("sig", b"", **KEEP)).id

    task_id = asyncio.run(enqueue())
    proc = _spawn(server_url, grace, seconds)
    try:
        assert _read_line(proc, "STARTED") == f"STARTED {task_id}"
        t0 = time.monotonic()
        for _ in range(signals):
            proc.send_signal(signal.SIGTERM)
            _read_line(proc, "INFO:conveyor.worker:received SIGTERM")  # handled before the next one
        assert _read_line(proc, "RETURNED") == "RETURNED threads=0"
        assert proc.wait(30) == 0
        assert time.monotonic() - t0 < 20
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()

    async def check() -> None:
        async with Client(server_url) as client:
            info = await wait_state(client, task_id, state)
            assert info.retried == 0 and info.last_error == ""

    asyncio.run(check())
