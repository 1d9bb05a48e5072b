"""SIGTERM with a 2 MiB Result stuck behind a stalled link: the in-process Worker still ends in bound."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.testing.faultproxy import SyncFaultProxy
from tests._util import wait_until

ROOT = Path(__file__).resolve().parents[2]


class Child:
    """The worker subprocess, its output collected by a thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.sdk_worker._big_result_worker", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        self.lines.extend(self.proc.stdout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)


@pytest.mark.parametrize(
    ("signals", "keepalive", "bound"),
    [
        (2, ("5", "10"), 5.0),  # the second signal does not wait for the 10 s keepalive timeout
        (1, ("0.3", "0.7"), 0.3 + 0.7 + 3.0),  # a drain ends once the keepalive gives the link up
    ],
)
def test_sigterm_ends_the_worker_while_a_big_result_is_stuck(
    server_url: str, tmp_path: Path, signals: int, keepalive: tuple[str, str], bound: float
) -> None:
    """A 2 MiB Result behind a stalled link: SIGTERM twice (or once, short keepalive) ends it in bound."""
    gate = tmp_path / "go"
    with SyncFaultProxy(server_url.removeprefix("http://")) as proxy:
        child = Child(proxy.url, str(gate), *keepalive)
        try:
            with SyncClient(server_url) as client:
                info = client.enqueue("big", b"", retention=3600)
            wait_until(lambda: child.saw(f"STARTED {info.id}"), timeout=30, what="task started")
            proxy.blackhole("both", mode="stall")
            gate.touch()
            wait_until(lambda: child.saw(f"task {info.id} (big) succeeded"), timeout=30, what="result queued")
            for _ in range(signals):
                child.proc.send_signal(signal.SIGTERM)
                wait_until(lambda: child.saw("received SIGTERM"), timeout=10, what="signal logged")
            started = time.monotonic()
            code = child.proc.wait(bound + 10)
            took = time.monotonic() - started
            assert code == 0, "".join(child.lines)
            assert took <= bound, (took, "".join(child.lines))
            assert child.saw("RETURNED")
        finally:
            child.close()
