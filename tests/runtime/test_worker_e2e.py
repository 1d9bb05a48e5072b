"""`conveyor worker` end to end: real server, real child processes, real signals."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import RetryPolicy, RetryStrategy, TaskInfo, TaskState
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.runtime._worker_proc import WorkerProc

pytestmark = pytest.mark.slow

APP = """
import asyncio, os, pathlib, time
from conveyor_sdk._worker.registry import Registry

app = Registry()
VERSION = "v1"
MARKS = pathlib.Path(os.environ["RT_MARKS"])


def mark(kind, task):
    (MARKS / f"{kind}~{task.id}~{task.retried}~{os.getpid()}~{VERSION}~{time.monotonic()}").touch()


@app.handler("slow")
async def slow(task, ctx):
    mark("start", task)
    await asyncio.sleep(float(task.payload.decode() or "0.3") if task.retried == 0 else 0.01)
    mark("done", task)


@app.handler("busy")
def busy(task, ctx):
    mark("start", task)
    time.sleep(float(task.payload.decode() or "0.2"))
    mark("done", task)


@app.handler("crash")
def crash(task, ctx):
    mark("start", task)
    os._exit(3)


@app.handler("stubborn")
def stubborn(task, ctx):
    mark("start", task)
    time.sleep(60)
"""

KEEP = 300.0  # keep finished tasks readable (the reference server purges at once by default)
FAST_RETRY = RetryPolicy(RetryStrategy.FIXED, base=0.05, max=0.05)
Factory = Callable[..., WorkerProc]


def _marks(folder: Path, kind: str) -> list[list[str]]:
    return [p.name.split("~") for p in (folder / "marks").iterdir() if p.name.startswith(kind + "~")]


def _setup(folder: Path, source: str = APP) -> dict[str, str]:
    (folder / "marks").mkdir(exist_ok=True)
    (folder / "rtapp.py").write_text(source)
    return {"RT_MARKS": str(folder / "marks")}


def _state(client: SyncClient, task_id: str, state: TaskState, timeout: float = 30) -> TaskInfo:
    def reached() -> TaskInfo | None:
        info = client.get_task(task_id)
        return info if info.state is state else None

    return wait_until(reached, timeout=timeout, interval=0.1, what=f"task {task_id} to be {state.name}")


def _worker(factory: Factory, folder: Path, server: ServerProcess, *args: str) -> WorkerProc:
    env = _setup(folder) if not (folder / "rtapp.py").exists() else {"RT_MARKS": str(folder / "marks")}
    proc = factory(folder, "rtapp:app", "--server", server.url, "--log-format", "json", *args, env=env)
    proc.wait_for("established")
    return proc


def test_kill_9_of_a_child_mid_task_retries_once(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """SIGKILL of the child running a task: the task completes later with retried == 1."""
    worker = _worker(worker_factory, tmp_path, server, "--processes", "2")
    with SyncClient(server.url) as client:
        info = client.enqueue("slow", b"30", max_retry=3, retry_policy=FAST_RETRY, retention=KEEP)
        [start] = wait_until(lambda: _marks(tmp_path, "start"), what="the task to start")
        os.kill(int(start[3]), signal.SIGKILL)
        done = _state(client, info.id, TaskState.COMPLETED)
        assert done.retried == 1
        assert "worker process died: SIGKILL" in (done.last_error or "worker process died: SIGKILL")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_poison_pill_is_archived_after_max_retry_plus_one_attempts(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """A handler that always os._exit()s is dead-lettered after 3 attempts (max_retry 2); others still run."""
    worker = _worker(worker_factory, tmp_path, server, "--processes", "2")
    with SyncClient(server.url) as client:
        info = client.enqueue("crash", b"", max_retry=2, retry_policy=FAST_RETRY, retention=KEEP)
        archived = _state(client, info.id, TaskState.ARCHIVED, timeout=60)
        assert archived.retried == 2
        assert "worker process died: exit code 3" in archived.last_error
        assert len(_marks(tmp_path, "start")) == 3
        ok = client.enqueue("slow", b"0.01", retention=KEEP)
        _state(client, ok.id, TaskState.COMPLETED)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_handler_ignoring_cancellation_past_deadline_is_killed(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """A sync handler sleeping past its timeout is killed: RETRY 'deadline exceeded', then archived."""
    worker = _worker(worker_factory, tmp_path, server, "--processes", "1")
    with SyncClient(server.url) as client:
        info = client.enqueue(
            "stubborn", b"", max_retry=1, timeout=1.0, retry_policy=FAST_RETRY, retention=KEEP
        )
        archived = _state(client, info.id, TaskState.ARCHIVED, timeout=60)
        assert archived.retried == 1
        assert "deadline exceeded" in archived.last_error
        assert len(_marks(tmp_path, "start")) == 2
        pids = {m[3] for m in _marks(tmp_path, "start")}
        assert len(pids) == 2  # the second attempt ran in the replacement child
        ok = client.enqueue("slow", b"0.01", retention=KEEP)
        _state(client, ok.id, TaskState.COMPLETED)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_sigterm_drain_under_load_loses_nothing_and_burns_no_retry(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """SIGTERM mid-load: the worker exits 0, every task is done or back in the queue, retried stays 0."""
    _setup(tmp_path)
    with SyncClient(server.url) as client:
        ids = [client.enqueue("slow", b"0.3", max_retry=5, retention=KEEP).id for _ in range(40)]
        worker = _worker(worker_factory, tmp_path, server, "--processes", "2", "--concurrency", "6")
        wait_until(lambda: len(_marks(tmp_path, "done")) >= 8, timeout=30, what="some tasks to finish")
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
        infos = [client.get_task(i) for i in ids]
        assert {i.state for i in infos} <= {TaskState.COMPLETED, TaskState.PENDING}
        assert all(i.retried == 0 for i in infos)
        second = _worker(worker_factory, tmp_path, server, "--processes", "2", "--concurrency", "6")
        for task_id in ids:
            assert _state(client, task_id, TaskState.COMPLETED).retried == 0
        second.signal(signal.SIGINT)
        assert second.wait() == 0


def test_sighup_reload_picks_up_changed_code_without_loss(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """SIGHUP: new tasks run the edited module; a task running in an old child completes normally."""
    worker = _worker(worker_factory, tmp_path, server, "--processes", "1", "--concurrency", "2")
    with SyncClient(server.url) as client:
        long = client.enqueue("slow", b"2.5", retention=KEEP)
        wait_until(lambda: _marks(tmp_path, "start"), what="the long task to start")
        (tmp_path / "rtapp.py").write_text(APP.replace('VERSION = "v1"', 'VERSION = "v2"'))
        worker.signal(signal.SIGHUP)
        worker.wait_for("reloaded")
        fresh = client.enqueue("slow", b"0.01", retention=KEEP)
        _state(client, fresh.id, TaskState.COMPLETED)
        assert [m[4] for m in _marks(tmp_path, "done") if m[1] == fresh.id] == ["v2"]
        done = _state(client, long.id, TaskState.COMPLETED)
        assert done.retried == 0
        assert [m[4] for m in _marks(tmp_path, "done") if m[1] == long.id] == ["v1"]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_weighted_queues_share_capacity_under_contention(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """-q a=3 -q b=1 with both queues backlogged: starts split 3:1 (within 15%)."""
    _setup(tmp_path)
    with SyncClient(server.url) as client:
        for _ in range(40):
            client.enqueue("busy", b"0.15", queue="a", retention=KEEP)
            client.enqueue("busy", b"0.15", queue="b", retention=KEEP)
        worker = _worker(
            worker_factory,
            tmp_path,
            server,
            "-q",
            "a=3",
            "-q",
            "b=1",
            "--processes",
            "2",
            "--concurrency",
            "4",
        )
        wait_until(lambda: len(_marks(tmp_path, "start")) >= 44, timeout=60, what="44 starts")
        starts = sorted(_marks(tmp_path, "start"), key=lambda m: float(m[5]))[:40]
        queue_of = {t.id: t.queue for t in (client.get_task(m[1]) for m in starts)}
    share_a = sum(1 for m in starts if queue_of[m[1]] == "a") / len(starts)
    assert abs(share_a - 0.75) <= 0.15, share_a
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_reload_flag_restarts_children_when_a_file_changes(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """--reload: editing the app module makes new tasks run the new code, with no restart of the session."""
    worker = _worker(worker_factory, tmp_path, server, "--processes", "1", "--reload")
    worker.wait_for("watching")
    with SyncClient(server.url) as client:
        first = client.enqueue("slow", b"0.01", retention=KEEP)
        _state(client, first.id, TaskState.COMPLETED)
        (tmp_path / "rtapp.py").write_text(APP.replace('VERSION = "v1"', 'VERSION = "v3"'))
        worker.wait_for("reloaded")
        second = client.enqueue("slow", b"0.01", retention=KEEP)
        _state(client, second.id, TaskState.COMPLETED)
        versions = {m[1]: m[4] for m in _marks(tmp_path, "done")}
        assert (versions[first.id], versions[second.id]) == ("v1", "v3")
    assert worker.output.count("established") == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_second_sigterm_releases_at_once(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """A long task under a long grace: the second SIGTERM exits at once and the task goes back un-burned."""
    worker = _worker(worker_factory, tmp_path, server, "--processes", "1", "--grace", "60s")
    with SyncClient(server.url) as client:
        info = client.enqueue("slow", b"60", retention=KEEP)
        wait_until(lambda: _marks(tmp_path, "start"), what="the task to start")
        worker.signal(signal.SIGTERM)
        worker.wait_for("draining")
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 0
        back = client.get_task(info.id)
        assert (back.state, back.retried) == (TaskState.PENDING, 0)
