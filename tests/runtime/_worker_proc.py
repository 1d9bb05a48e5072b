"""Run ``conveyor worker`` as a real subprocess and watch its output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from tests._util import wait_until


class WorkerProc:
    """``python -m conveyor_cli worker ARGS`` in ``folder``, output collected line by line."""

    def __init__(self, folder: Path, args: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.args = list(args)
        # CONVEYOR_EMBEDDED_PORT=0: an embedded server never takes the fixed 8080 in tests (unless asked to)
        self.env = {**os.environ, "CONVEYOR_EMBEDDED_PORT": "0", **(env or {}), "PYTHONUNBUFFERED": "1"}
        self.env.pop("CONVEYOR_ADDR", None)
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> WorkerProc:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "conveyor_cli", "worker", *self.args],
            cwd=self.folder,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        """Wait until ``text`` appears in the output (fails early if the worker exits)."""

        def seen() -> bool:
            if text in self.output:
                return True
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"worker exited ({self.proc.returncode}) before {text!r}:\n{self.output}"
                )
            return False

        wait_until(seen, timeout=timeout, what=repr(text))

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker still running after {timeout}s:\n{self.output}") from None
        if self._reader is not None:
            self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
