"""The embedded reference server ``conveyor worker`` starts when no ``--server`` is given.

It listens on 127.0.0.1:8080 when that port is free, so the operator commands'
default (``http://localhost:8080``) reaches it from a second terminal; otherwise
on a port the kernel picks. ``CONVEYOR_EMBEDDED_PORT`` changes the preferred port
(``0``: always a random one). It runs as its own process, so it never competes for the
supervisor's GIL: the bare reference server (``python -m conveyor_server_min``) unless the
caller names another command; ``conveyor worker`` names ``conveyor server``'s, which adds the
dashboard (the runtime never imports, or names, the CLI). The process is tied to the
supervisor's life twice over: ``PR_SET_PDEATHSIG`` kills it if the supervisor dies (set by a
tiny trampoline that then execs the command, as the flag survives exec), and
:meth:`EmbeddedServer.stop` SIGTERMs it on a normal exit. Readiness is its
``listening on http://HOST:PORT`` line (read with a timeout, no sleep); a ``dashboard on URL``
line before it gives :attr:`EmbeddedServer.dashboard_url`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

__all__ = [
    "DEFAULT_PORT",
    "PORT_ENV",
    "SERVER_COMMAND",
    "EmbeddedServer",
    "EmbeddedServerError",
    "answers_as_conveyor",
    "preferred_port",
]

DEFAULT_PORT = 8080
PORT_ENV = "CONVEYOR_EMBEDDED_PORT"
log = logging.getLogger("conveyor.server")

_LISTENING = re.compile(r"^listening on (https?://\S+)\s*$")
_DASHBOARD = re.compile(r"^dashboard on (https?://\S+?)/? for ")
SERVER_COMMAND = (sys.executable, "-m", "conveyor_server_min")  # the bare server; no dashboard
# Runs argv[1:] with PR_SET_PDEATHSIG set: the flag survives exec, and setting it here (not in a
# preexec_fn) keeps the fork of a threaded supervisor free of Python code. ``-S``: no site, so
# the trampoline costs a few milliseconds.
_TIE_TO_PARENT = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
    "except Exception:\n"
    "    pass\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)


class EmbeddedServerError(Exception):
    """The embedded server did not start."""


class _PortTaken(Exception):
    """The preferred port was taken between the check and the server's bind."""


def preferred_port(environ: dict[str, str] | None = None) -> int:
    """The port to try first: ``$CONVEYOR_EMBEDDED_PORT`` or 8080. ValueError when invalid."""
    text = (os.environ if environ is None else environ).get(PORT_ENV, "").strip()
    if not text:
        return DEFAULT_PORT
    try:
        port = int(text)
    except ValueError:
        raise ValueError(f"{PORT_ENV} must be a port number (0..65535), got {text!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{PORT_ENV} must be between 0 and 65535, got {port}")
    return port


def port_free(host: str, port: int) -> bool:
    """True when ``host:port`` can be bound now (with SO_REUSEADDR, as the server binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def answers_as_conveyor(url: str, timeout: float = 2.0) -> bool:
    """True when ``url`` answers a Connect GetTask the way a Conveyor server does (not_found, or an auth
    refusal). A plain HTTP/1.1 JSON call, so the runtime needs no client (CONTRIBUTING.md, "Layers")."""
    request = urllib.request.Request(
        url.rstrip("/") + "/conveyor.v1.TaskService/GetTask",
        data=json.dumps({"id": "00000000000000000000000000"}).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # a local port: no proxy
    try:
        with opener.open(request, timeout=timeout):
            return True  # a task with that id: still a Conveyor server
    except urllib.error.HTTPError as exc:
        with exc:
            try:
                code = json.loads(exc.read()).get("code")
            except (ValueError, AttributeError):
                return False
        return code in {"not_found", "unauthenticated", "permission_denied"}
    except (OSError, ValueError):  # refused, reset, timed out, not HTTP: not a Conveyor server
        return False


class EmbeddedServer:
    """A dev-mode reference server on 127.0.0.1: the preferred port when free, else any."""

    def __init__(
        self,
        args: tuple[str, ...] = (),
        *,
        command: tuple[str, ...] = SERVER_COMMAND,
        start_timeout: float = 30.0,
        port: int | None = None,
    ) -> None:
        self.args = args
        self.command = command or SERVER_COMMAND  # the server's argv before its flags
        self.dashboard_url = ""  # the web dashboard, when the server announced one
        self.start_timeout = start_timeout
        self.port = preferred_port() if port is None else port
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        """Spawn, wait for the listening line, return the URL (preferred port first)."""
        if self.port and port_free("127.0.0.1", self.port):
            try:
                return self._launch(self.port)
            except _PortTaken:
                pass
        if self.port and answers_as_conveyor(f"http://127.0.0.1:{self.port}"):
            # Two servers: producers reach the one on the preferred port, this worker serves the
            # other, and nothing says so. Say it loudly, and how to join the running one.
            log.warning(
                "a Conveyor server already answers on 127.0.0.1:%d; this worker starts its own embedded "
                "server on another port, so tasks enqueued to 127.0.0.1:%d reach no worker here. "
                "To serve that server instead: conveyor worker ... --server http://127.0.0.1:%d",
                self.port, self.port, self.port,
            )  # fmt: skip
        elif self.port:
            log.info("port %d is in use; the embedded server takes a free port instead", self.port)
        return self._launch(0)

    def _launch(self, port: int) -> str:
        server = [*self.command, "--dev", "--host", "127.0.0.1", "--port", str(port), *self.args]
        cmd = [sys.executable, "-S", "-c", _TIE_TO_PARENT, *server]
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
        buf = seen = b""
        while not self._ready():
            left = deadline - time.monotonic()
            readable, _, _ = select.select([fd], [], [], max(0.0, left))
            if not readable:
                self.stop()
                raise EmbeddedServerError(f"embedded server not ready after {self.start_timeout:.0f}s")
            chunk = os.read(fd, 4096)
            if not chunk:
                code = self.proc.wait(5)
                self.proc.stdout.close()
                if port and b"cannot listen" in seen:
                    raise _PortTaken(seen.decode(errors="replace").strip())
                said = [ln for ln in seen.decode(errors="replace").splitlines() if ln.startswith("error: ")]
                reason = f": {said[-1].removeprefix('error: ')}" if said else ""
                raise EmbeddedServerError(f"embedded server exited with code {code} before listening{reason}")
            buf += chunk
            seen = (seen + chunk)[-65536:]
            while b"\n" in buf and not self._ready():
                line, buf = buf.split(b"\n", 1)
                text = line.decode(errors="replace")
                if match := _LISTENING.match(text):
                    self.url = match.group(1)
                elif match := _DASHBOARD.match(text):
                    self.dashboard_url = match.group(1) + "/"
        threading.Thread(target=self._drain, args=(fd,), name="embedded-server-out", daemon=True).start()
        return self.url

    def _ready(self) -> bool:
        return bool(self.url)

    def _drain(self, fd: int) -> None:
        """Log the server's output line by line (``conveyor.server``), so it never garbles other output."""
        pending = b""
        with contextlib.suppress(OSError, ValueError):
            while chunk := os.read(fd, 65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    log.info("%s", line.decode(errors="replace").rstrip())
                pending = pending[-65536:]  # a line without an end never grows without bound
        if pending.strip():
            log.info("%s", pending.decode(errors="replace").rstrip())

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
