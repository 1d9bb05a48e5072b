"""Process plumbing for the peers bench: CPU from /proc, process trees, brokers, clean stops."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK


def tree(pid: int) -> list[int]:
    """``pid`` and every live descendant."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(parents.get(current, []))
    return out


def tree_cpu(pids: list[int]) -> dict[int, float]:
    return {pid: cpu_seconds(pid) for pid in pids}


def cpu_delta(before: dict[int, float]) -> float:
    """CPU the processes of ``before`` used since (a process that exited counts what it had)."""
    total = 0.0
    for pid, start in before.items():
        now = cpu_seconds(pid)
        total += max(0.0, now - start) if now else 0.0
    return total


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM (each system's own clean stop), then SIGKILL of its process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # started with start_new_session: the group is ours
    proc.wait(10)


@dataclass
class Broker:
    """A running broker or server: its address, the pid whose CPU counts, and how to stop it."""

    url: str
    pid: int
    proc: subprocess.Popen[bytes] | None = None
    keep: list[object] = field(default_factory=list)

    def close(self) -> None:
        if self.proc is not None:
            stop(self.proc)
        for item in self.keep:
            stopper = getattr(item, "stop", None)
            if stopper is not None:
                stopper()


def redis_server() -> str | None:
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )


def start_redis(folder: Path) -> Broker:
    """Debian's redis-server on a free port, no persistence (its defaults otherwise)."""
    exe = redis_server()
    if exe is None:
        raise RuntimeError("redis-server not installed (apt-get install redis-server)")
    port = free_port()
    cmd = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
           "--dir", str(folder), "--daemonize", "no"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            if s.recv(16).startswith(b"+PONG"):
                return Broker(f"redis://127.0.0.1:{port}/0", proc.pid, proc)
        time.sleep(0.02)
    stop(proc)
    raise RuntimeError("redis-server did not answer PING within 10 s")


def start_ours() -> Broker:
    """The reference server at its defaults (``ServerProcess``: dev mode, port 0)."""
    from conveyor_server_min.testing import ServerProcess

    server = ServerProcess()
    server.start()
    assert server.proc is not None
    return Broker(server.url, server.proc.pid, None, [server])


_CONVEYORD_YAML = """mode: standalone
broker:
  driver: memory
api:
  listen: 127.0.0.1:{api}
  allow_unauthenticated: true
metrics:
  listen: 127.0.0.1:{metrics}
cluster:
  discovery: static
  bind_addr: 127.0.0.1
  remoting_port: {remoting}
  discovery_port: {discovery}
  peers_port: {peers}
log:
  level: warn
  format: text
"""


def start_conveyord(binary: str, folder: Path) -> Broker:
    """A fresh standalone conveyord (memory broker, its defaults otherwise) on free ports.

    Fresh for each run, as Redis is: a long-lived conveyord slows down as runs accumulate
    (measured: 4,845 -> 570 no-op tasks/s for the same worker over 12 runs), which would
    charge the later systems of a round for the earlier ones.
    """
    ports = {name: free_port() for name in ("api", "metrics", "remoting", "discovery", "peers")}
    config = folder / "conveyord.yaml"
    config.write_text(_CONVEYORD_YAML.format(**ports))
    env = {**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", "4")}  # see conveyord.sh
    log = (folder / "conveyord.log").open("wb")
    proc = subprocess.Popen([binary, "--config", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)  # fmt: skip
    log.close()
    url = f"http://127.0.0.1:{ports['api']}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "/readyz", timeout=1) as answer:
            if answer.read().strip() == b"ok":
                return Broker(url, proc.pid, proc)
        time.sleep(0.1)
    stop(proc)
    raise RuntimeError(f"conveyord not ready within 60 s: {(folder / 'conveyord.log').read_text()[-300:]}")
