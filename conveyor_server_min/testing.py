"""Start the reference server as a real subprocess for tests, benchmarks and the conformance suite.

The server binds port 0 and prints exactly one ``listening on http://HOST:PORT``
line when ready; :class:`ServerProcess` waits for that line (with a timeout,
never a fixed sleep), exposes the URL, and on ``stop()`` sends SIGTERM and
checks for a clean exit.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from types import TracebackType

__all__ = ["ServerProcess", "ServerStartError"]

_LISTENING = re.compile(r"^listening on (https?://\S+)\s*$")


class ServerStartError(RuntimeError):
    """The server did not print its listening line in time, or exited early."""


class ServerProcess:
    """A ``python -m conveyor_server_min`` child on a free port.

    ``args`` are extra command-line flags, e.g. ``["--lease-ttl", "2s"]``.
    ``--port 0`` and ``--host 127.0.0.1`` are added unless given; ``--dev`` is
    added unless a ``--token`` is given. ``module`` is what ``python -m`` runs:
    ``conveyor_cli.server_cmd`` is ``conveyor server``, the server with the dashboard.
    """

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        env: dict[str, str] | None = None,
        start_timeout: float = 20.0,
        module: str = "conveyor_server_min",
    ) -> None:
        self.args = list(args)
        self.module = module
        self.env = env
        self.start_timeout = start_timeout
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self._reader: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def address(self) -> str:
        """``host:port`` without the scheme."""
        return self.url.split("://", 1)[1]

    def command(self) -> list[str]:
        """The full command line that ``start`` runs."""
        cmd = [sys.executable, "-m", self.module, *self.args]
        if "--port" not in self.args:
            cmd += ["--port", "0"]
        if "--host" not in self.args:
            cmd += ["--host", "127.0.0.1"]
        if "--token" not in self.args and "--dev" not in self.args:
            cmd.append("--dev")
        return cmd

    def start(self) -> str:
        """Spawn the server and wait for its listening line; returns the URL."""
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self._reader = threading.Thread(target=self._read, name="server-output", daemon=True)
        self._reader.start()
        if not self._ready.wait(self.start_timeout) or not self.url:
            self.kill()
            raise ServerStartError("server did not become ready:\n" + "".join(self.output[-40:]))
        return self.url

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            match = _LISTENING.match(line)
            if match and not self.url:
                self.url = match.group(1)
                self._ready.set()
        self._ready.set()

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait for exit, and return the exit code (0 when clean)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_pipe()
        return self.proc.returncode if self.proc.returncode is not None else -1

    def _close_pipe(self) -> None:
        if self._reader is not None:
            self._reader.join(5)
        if self.proc is not None and self.proc.stdout is not None and not self.proc.stdout.closed:
            self.proc.stdout.close()

    def kill(self) -> None:
        """Kill without grace (used when start fails)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close_pipe()

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
