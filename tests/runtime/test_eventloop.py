"""--loop: the runtime and the server run on uvloop by default, asyncio on request, and say so."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk._transport import eventloop
from conveyor_sdk.client import SyncClient
from conveyor_sdk.errors import InvalidArgument
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.runtime._procs import descendants
from tests.runtime._worker_proc import WorkerProc

uvloop = pytest.importorskip("uvloop")  # a dependency on every platform CI runs

APP = """
import asyncio, os, pathlib
from conveyor_sdk._worker.registry import Registry
from conveyor_sdk._transport.eventloop import loop_kind

app = Registry()


@app.handler("which")
async def which(task, ctx):
    (pathlib.Path(os.environ["LOOP_MARKS"]) / loop_kind(asyncio.get_running_loop())).touch()
"""


async def _kind() -> str:
    return eventloop.loop_kind(asyncio.get_running_loop())


def test_run_picks_the_named_loop() -> None:
    """auto and uvloop run on uvloop; asyncio on asyncio's own loop."""
    assert eventloop.resolve("auto") == "uvloop"
    assert eventloop.run(_kind(), "auto") == "uvloop"
    assert eventloop.run(_kind(), "uvloop") == "uvloop"
    assert eventloop.run(_kind(), "asyncio") == "asyncio"


def test_unknown_or_missing_loop_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad name, or uvloop asked for where it is not installed, raises InvalidArgument; auto falls back."""
    with pytest.raises(InvalidArgument, match="unknown event loop 'tokio'"):
        eventloop.run(_kind(), "tokio")
    monkeypatch.setattr(eventloop, "_have_uvloop", lambda: False)  # cannot uninstall it for one test
    with pytest.raises(InvalidArgument, match="uvloop is not installed"):
        eventloop.resolve("uvloop")
    assert eventloop.run(_kind(), "auto") == "asyncio"


def test_in_process_worker_runs_on_uvloop() -> None:
    """Our Worker and Client run on a uvloop loop (their transports are not asyncio.Transport subclasses)."""
    ran: list[str] = []
    reg = Registry()

    async def main(url: str) -> None:
        from conveyor_sdk.client import Client

        done = asyncio.Event()

        @reg.handler("which")
        async def which(task: TaskData, ctx: TaskContext) -> None:
            ran.append(eventloop.loop_kind(asyncio.get_running_loop()))
            done.set()

        worker = Worker(url, queues={"default": 1}, concurrency=2)
        runner = asyncio.ensure_future(worker.run(reg))
        async with Client(url) as client:
            await client.enqueue("which", b"")
            await asyncio.wait_for(done.wait(), 20)
        worker.stop()
        await asyncio.wait_for(runner, 20)

    with ServerProcess() as server:
        uvloop.run(main(server.url))
    assert ran == ["uvloop"]


@pytest.mark.slow
@pytest.mark.parametrize(("flag", "expected"), [((), "uvloop"), (("--loop", "asyncio"), "asyncio")])
def test_worker_children_run_on_the_chosen_loop(
    tmp_path: Path,
    server: ServerProcess,
    worker_factory: Callable[..., WorkerProc],
    flag: tuple[str, ...],
    expected: str,
) -> None:
    """`conveyor worker` logs its loop, and the handler in the child process runs on it."""
    (tmp_path / "loopapp.py").write_text(APP)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {"LOOP_MARKS": str(marks)}
    worker = worker_factory(
        tmp_path, "loopapp:app", "--server", server.url, "--processes", "1", *flag, env=env
    )
    worker.wait_for("established")
    assert f"event loop {expected}" in worker.output
    with SyncClient(server.url) as client:
        client.enqueue("which", b"")
        wait_until(lambda: list(marks.iterdir()), timeout=30, what="the task to run")
    assert [p.name for p in marks.iterdir()] == [expected]


def test_bad_loop_on_the_command_line_exits_with_one_line(tmp_path: Path) -> None:
    """`--loop tokio` to `conveyor worker` or `python -m conveyor_server_min`: one line, no traceback."""
    (tmp_path / "loopapp.py").write_text(APP)
    worker = subprocess.run(
        [sys.executable, "-m", "conveyor_cli", "worker", "loopapp:app", "--loop", "tokio"],
        cwd=tmp_path,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode != 0
    assert "unknown event loop 'tokio'" in worker.stderr
    assert "Traceback" not in worker.stderr + worker.stdout
    server = subprocess.run(
        [sys.executable, "-m", "conveyor_server_min", "--dev", "--port", "0", "--loop", "tokio"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert server.returncode == 2
    assert "error: --loop: unknown event loop 'tokio'" in server.stderr
    assert "Traceback" not in server.stderr + server.stdout


def test_server_says_which_loop_it_serves_on() -> None:
    """The reference server runs on uvloop by default and on asyncio with --loop asyncio."""
    for args, expected in (((), "uvloop"), (("--loop", "asyncio"), "asyncio")):
        with ServerProcess(list(args)) as server:
            wait_until(
                lambda s=server: any("serving on" in line for line in s.output),
                timeout=10,
                what="serving line",
            )
            line = next(line for line in server.output if "serving on" in line)
            assert f"event loop {expected}" in line


@pytest.mark.slow
def test_embedded_server_runs_on_the_workers_loop(
    tmp_path: Path, worker_factory: Callable[..., WorkerProc]
) -> None:
    """Without --server, the embedded server is started with the worker's --loop, and serves tasks."""
    (tmp_path / "loopapp.py").write_text(APP)
    marks = tmp_path / "marks"
    marks.mkdir()
    worker = worker_factory(tmp_path, "loopapp:app", "--loop", "asyncio", "--processes", "1",
                            env={"LOOP_MARKS": str(marks)})  # fmt: skip
    worker.wait_for("established")
    assert worker.proc is not None
    servers = [cmd for _, _, cmd in descendants(worker.proc.pid) if "--dev" in cmd.split()]
    assert len(servers) == 1 and servers[0].endswith("--loop asyncio"), servers
    url = next(w for w in worker.output.split() if w.startswith("http://127.0.0.1:"))
    with SyncClient(url) as client:
        client.enqueue("which", b"")
    wait_until(lambda: list(marks.iterdir()), timeout=30, what="the task to run")
    assert [p.name for p in marks.iterdir()] == ["asyncio"]
