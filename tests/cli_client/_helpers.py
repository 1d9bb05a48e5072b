"""Shared helpers for the CLI tests: run a command in-process (CliRunner) or as a real process."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import IO, Any

from typer.testing import CliRunner, Result

from conveyor_cli.app import app


def uid(prefix: str = "c") -> str:
    """A unique name for queues, ids and keys."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def run(url: str, *args: str, input: str | None = None) -> Result:
    """``conveyor ARGS`` against ``url`` (stdout is not a TTY under CliRunner)."""
    return CliRunner().invoke(app, list(args), input=input, env={"CONVEYOR_ADDR": url, "CONVEYOR_TOKEN": ""})


def run_json(url: str, *args: str, input: str | None = None) -> Any:
    """``conveyor ARGS -o json``, asserting exit 0, parsed."""
    result = run(url, *args, "-o", "json", input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def assert_one_line_error(result: Result, message: str) -> None:
    """Exit 1, exactly one `error:` line on stderr containing ``message``, no traceback."""
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stderr.startswith("error:") and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout


class Lines:
    """Lines of a child's pipe collected by a thread, awaited with timeouts (never fixed sleeps)."""

    def __init__(self, pipe: IO[str]) -> None:
        self.pipe = pipe
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self._queue.put(line)
        self._queue.put(None)

    def close(self) -> None:
        """After the child exited: wait for EOF and close the pipe."""
        self._thread.join(10)
        self.pipe.close()

    def expect(self, predicate: Callable[[str], bool], timeout: float = 20.0) -> str:
        """The next line matching ``predicate``; AssertionError after ``timeout`` or EOF."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching line within {timeout}s; seen: {self.seen[-20:]}")
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"stream ended; seen: {self.seen[-20:]}")
            self.seen.append(line)
            if predicate(line):
                return line


def spawn(url: str, *args: str) -> subprocess.Popen[str]:
    """``python -m conveyor_cli ARGS`` as a real child process with piped output."""
    env = {**os.environ, "CONVEYOR_ADDR": url, "PYTHONUNBUFFERED": "1"}
    env.pop("CONVEYOR_TOKEN", None)
    return subprocess.Popen(
        [sys.executable, "-m", "conveyor_cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
