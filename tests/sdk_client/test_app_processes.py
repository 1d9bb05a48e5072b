"""A typed App served by `conveyor worker` child processes: decoding happens in the child."""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conveyor_sdk.client import Client
from conveyor_sdk.types import TaskState
from tests._util import eventually

APP_MODULE = """
import os
import msgspec
from conveyor_sdk.app import App

app = App()
OUT = os.environ["CONVEYOR_TEST_OUT"]


class Welcome(msgspec.Struct):
    user_id: int


@app.task("proc:welcome", queue="proc-app", retention=3600)
def send_welcome(payload: Welcome, ctx) -> None:
    with open(OUT, "a") as fh:
        fh.write(f"{type(payload).__name__}:{payload.user_id}:{os.getpid()}\\n")
"""


def test_typed_app_in_worker_processes(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tasks enqueued through the typed definition are decoded into the Struct inside a child process."""
    (tmp_path / "typed_app_mod.py").write_text(textwrap.dedent(APP_MODULE))
    out = tmp_path / "out.txt"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "CONVEYOR_TEST_OUT": str(out)}  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CONVEYOR_TEST_OUT", str(out))
    mod = importlib.import_module("typed_app_mod")
    cmd = [sys.executable, "-m", "conveyor_cli", "worker", "typed_app_mod:app", "--server", url,
           "--processes", "1", "--grace", "2s"]  # fmt: skip
    worker = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:

        async def main() -> None:
            async with Client(url) as client:
                infos = [await mod.send_welcome.enqueue(client, mod.Welcome(user_id=i)) for i in (7, 8)]

                async def all_done() -> bool:
                    states = [(await client.get_task(i.id)).state for i in infos]
                    return all(s is TaskState.COMPLETED for s in states)

                await eventually(all_done, timeout=60, interval=0.1, what="tasks completed by the child")

        asyncio.run(main())
        lines = sorted(out.read_text().splitlines())
        assert [line.rsplit(":", 1)[0] for line in lines] == ["Welcome:7", "Welcome:8"]
        assert all(int(line.rsplit(":", 1)[1]) != worker.pid for line in lines)  # ran in a child
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            _, err = worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            _, err = worker.communicate(timeout=10)
        sys.modules.pop("typed_app_mod", None)
    assert worker.returncode == 0, err[-2000:]
