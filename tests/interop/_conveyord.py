"""Start conveyord (the upstream Go server) on ports picked at runtime, wait for /readyz, stop it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

DSN_TEMPLATE = "postgres://conveyor_interop:conveyor_interop@127.0.0.1:5432/{db}?sslmode=disable"


def free_port() -> int:
    """A port the kernel had free a moment ago (bind 0, release); start() retries on a clash."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout: float = 1.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


class Conveyord:
    """One conveyord node: its YAML config, its ports and its process."""

    def __init__(
        self,
        binary: str,
        *,
        dsn: str | None = None,
        tokens: tuple[str, ...] = (),
        lease_ttl: str = "2s",
        reap_interval: str = "500ms",
        cluster_ports: list[int] | None = None,
        extra: str = "",
    ) -> None:
        self.binary = binary
        self.dsn = dsn
        self.tokens = tokens
        self.lease_ttl = lease_ttl
        self.reap_interval = reap_interval
        self.extra = extra
        self.dir = Path(tempfile.mkdtemp(prefix="conveyord-interop-"))
        self.ports = [free_port() for _ in range(5)]  # api, metrics, remoting, discovery, peers
        self.cluster_ports = cluster_ports  # every node's discovery port, for static peers
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[1]}"

    @property
    def log(self) -> str:
        path = self.dir / "conveyord.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def config(self) -> str:
        broker = f"  driver: postgres\n  dsn: {self.dsn}" if self.dsn else "  driver: memory"
        if self.tokens:
            auth = "  auth_tokens: [" + ", ".join(f'"{t}"' for t in self.tokens) + "]"
        else:
            auth = "  allow_unauthenticated: true"
        peers = ""
        if self.cluster_ports:
            peers = "  static_peers: [" + ", ".join(f'"127.0.0.1:{p}"' for p in self.cluster_ports) + "]\n"
        api, metrics, remoting, discovery, peers_port = self.ports
        return (
            f"mode: {'cluster' if self.cluster_ports else 'standalone'}\n"
            f"broker:\n{broker}\n"
            f"api:\n  listen: 127.0.0.1:{api}\n{auth}\n"
            f"metrics:\n  listen: 127.0.0.1:{metrics}\n"
            f"cluster:\n  discovery: static\n  bind_addr: 127.0.0.1\n"
            f"  remoting_port: {remoting}\n  discovery_port: {discovery}\n  peers_port: {peers_port}\n{peers}"
            f"engine:\n  lease_ttl: {self.lease_ttl}\n  reap_interval: {self.reap_interval}\n{self.extra}"
            f"log:\n  level: info\n  format: text\n"
        )

    def start(self, timeout: float = 90.0) -> None:
        """Write the config, start the process (GOMAXPROCS=4) and wait for /readyz to say ok."""
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Write the config and start the process, without waiting (cluster nodes start together)."""
        path = self.dir / "conveyord.yaml"
        path.write_text(self.config())
        env = {**os.environ, "GOMAXPROCS": "4"}
        with open(self.dir / "conveyord.log", "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--config", str(path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )

    def ready(self) -> bool:
        try:
            return _get(self.url + "/readyz").strip() == "ok"
        except OSError:
            return False

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready():
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"conveyord exited with {self.proc.returncode}:\n{self.log[-3000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"conveyord not ready after {timeout}s:\n{self.log[-3000:]}")

    def kill(self) -> None:
        """kill -9, as a crashing node."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode
