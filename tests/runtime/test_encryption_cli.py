"""`conveyor worker` opens sealed payloads with keys from --key-file or the environment, never argv."""

from __future__ import annotations

import base64
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.encryption import Key, Keyring
from conveyor_sdk.types import TaskState
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.runtime._worker_proc import WorkerProc

Factory = Callable[..., WorkerProc]
OLD = Key("old", b"\x07" * 32)
NEW = Key("new", bytes(range(50, 82)))

APP = """
from conveyor_sdk.worker import Registry, SkipRetry

app = Registry()

@app.handler("sealed", queue="vault")
def sealed(task, ctx):
    if task.payload != b'{"secret":1}' or "conveyor.encryption" in task.metadata:
        raise SkipRetry("handler saw a sealed payload")
"""


def _text(key: Key) -> str:
    return f"{key.id}:{base64.b64encode(key.secret).decode()}"


def _enqueue_sealed(url: str, ring: Keyring) -> str:
    with SyncClient(url, encryption=ring) as client:
        return client.enqueue("sealed", {"secret": 1}, queue="vault", retention=300).id


@pytest.mark.parametrize("source", ["key-file", "env"])
def test_worker_opens_sealed_tasks_in_process_mode(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory, source: str
) -> None:
    """Children run the handler on plaintext; the old (retired) key still opens older tasks."""
    (tmp_path / "vaultapp.py").write_text(APP)
    args = ["vaultapp:app", "--server", server.url, "--processes", "1"]
    env: dict[str, str] = {}
    if source == "key-file":
        (tmp_path / "keys").write_text(f"# active first\n{_text(NEW)}\n{_text(OLD)}\n")
        args += ["--key-file", str(tmp_path / "keys")]
    else:
        env["CONVEYOR_ENCRYPTION_KEY"] = f"{_text(NEW)},{_text(OLD)}"
    ids = [_enqueue_sealed(server.url, Keyring(OLD)), _enqueue_sealed(server.url, Keyring(NEW))]
    proc = worker_factory(tmp_path, *args, env=env)
    proc.wait_for("established")
    with SyncClient(server.url) as client:
        for task_id in ids:
            wait_until(lambda t=task_id: client.get_task(t).state is TaskState.COMPLETED, timeout=30)
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
    assert "keys ['new', 'old'] (active new)" in proc.output
    secrets = [base64.b64encode(k.secret).decode() for k in (OLD, NEW)]
    assert not [s for s in secrets if s in proc.output]


def test_bad_key_file_is_a_one_line_error(tmp_path: Path, worker_factory: Factory) -> None:
    """A key file with a short secret stops the command with exit 1 before connecting."""
    (tmp_path / "vaultapp.py").write_text(APP)
    (tmp_path / "keys").write_text("k1:" + base64.b64encode(b"short").decode() + "\n")
    proc = worker_factory(
        tmp_path, "vaultapp:app", "--server", "http://127.0.0.1:9", "--key-file", str(tmp_path / "keys")
    )
    assert proc.wait(60) == 1
    assert "error: key file" in proc.output and "32 bytes" in proc.output
    assert "Traceback" not in proc.output and "connecting" not in proc.output
