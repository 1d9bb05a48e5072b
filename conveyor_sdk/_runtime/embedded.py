"""The embedded reference server ``conveyor worker`` starts when no ``--server`` is given.

It runs as its own process (``python -m conveyor_server_min --dev --port 0``),
so it never competes for the supervisor's GIL, and it is tied to the
supervisor's life twice over: ``PR_SET_PDEATHSIG`` kills it if the supervisor
dies, and :meth:`EmbeddedServer.stop` SIGTERMs it on a normal exit. Readiness
is its ``listening on http://HOST:PORT`` line (read with a timeout, no sleep).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

__all__ = ["EmbeddedServer", "EmbeddedServerError"]

_LISTENING = re.compile(r"^listening on (https?://\S+)\s*$")
_DASHBOARD = re.compile(r"^dashboard on (https?://\S+) for ")
_BOOT = (
    "import ctypes, runpy, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
    "except Exception:\n"
    "    pass\n"
    "sys.argv = ['conveyor_server_min', *sys.argv[1:]]\n"
    "runpy.run_module('conveyor_server_min', run_name='__main__', alter_sys=True)\n"
)


class EmbeddedServerError(Exception):
    """The embedded server did not start."""


class EmbeddedServer:
    """A dev-mode reference server on 127.0.0.1, port 0."""

    def __init__(self, args: tuple[str, ...] = (), *, start_timeout: float = 30.0) -> None:
        self.args = args
        self.start_timeout = start_timeout
        self.url = ""
        self.dashboard_url = ""  # set when started with --dashboard-port (docs/dashboard.md)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        """Spawn, wait for the listening line, return the URL."""
        cmd = [sys.executable, "-c", _BOOT, "--dev", "--host", "127.0.0.1", "--port", "0", *self.args]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            process_group=0,
        )
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + self.start_timeout
        buf = b""
        while not self._ready():
            left = deadline - time.monotonic()
            readable, _, _ = select.select([fd], [], [], max(0.0, left))
            if not readable:
                self.stop()
                raise EmbeddedServerError(f"embedded server not ready after {self.start_timeout:.0f}s")
            chunk = os.read(fd, 4096)
            if not chunk:
                code = self.proc.wait(5)
                raise EmbeddedServerError(f"embedded server exited with code {code} before listening")
            buf += chunk
            while b"\n" in buf and not self._ready():
                line, buf = buf.split(b"\n", 1)
                text = line.decode(errors="replace")
                if match := _LISTENING.match(text):
                    self.url = match.group(1)
                elif match := _DASHBOARD.match(text):
                    self.dashboard_url = match.group(1)
        threading.Thread(target=self._drain, args=(fd,), name="embedded-server-out", daemon=True).start()
        return self.url

    def _ready(self) -> bool:
        return bool(self.url) and (bool(self.dashboard_url) or "--dashboard-port" not in self.args)

    def _drain(self, fd: int) -> None:
        """Copy the server's output to our current stderr (the live view's proxy while it runs)."""
        with contextlib.suppress(OSError, ValueError):
            while chunk := os.read(fd, 65536):
                sys.stderr.write(chunk.decode(errors="replace"))
                sys.stderr.flush()

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait (SIGKILL after ``timeout``); returns the exit code."""
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        return proc.returncode if proc.returncode is not None else -1
