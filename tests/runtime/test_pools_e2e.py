"""Pools end to end: a session per pool, lending in a shared pool, /healthz and /readyz (real server)."""

from __future__ import annotations

import re
import signal
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import TaskState
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.conftest import FAST_ARGS
from tests.runtime._worker_proc import WorkerProc

pytestmark = pytest.mark.slow

APP = """
import asyncio, os, pathlib, time
from conveyor_sdk._worker.registry import Registry

app = Registry()
VERSION = "v1"
MARKS = pathlib.Path(os.environ["RT_MARKS"])


def mark(kind, task):
    (MARKS / f"{kind}~{task.id}~{task.queue}~{os.getpid()}~{VERSION}~{time.monotonic()}").touch()


@app.handler("slow")
async def slow(task, ctx):
    mark("start", task)
    what = task.payload.decode() or "0.01"
    if what.startswith("gate:"):  # run until the test creates that file
        while not (MARKS.parent / what[5:]).exists():
            await asyncio.sleep(0.01)
    else:
        await asyncio.sleep(float(what))
    mark("done", task)
"""

KEEP = 300.0
Factory = Callable[..., WorkerProc]


def _marks(folder: Path, kind: str, queue: str | None = None) -> list[list[str]]:
    found = [p.name.split("~") for p in (folder / "marks").iterdir() if p.name.startswith(kind + "~")]
    return sorted((m for m in found if queue in (None, m[2])), key=lambda m: float(m[5]))


def _worker(factory: Factory, folder: Path, url: str, *args: str, established: bool = True) -> WorkerProc:
    (folder / "marks").mkdir(exist_ok=True)
    (folder / "rtapp.py").write_text(APP)
    env = {"RT_MARKS": str(folder / "marks")}
    proc = factory(folder, "rtapp:app", "--server", url, "--log-format", "json", *args, env=env)
    if established:
        proc.wait_for("established")
    return proc


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _metrics_port(worker: WorkerProc) -> int:
    worker.wait_for("/readyz")
    found = re.search(r"http://127\.0\.0\.1:(\d+) \(/metrics", worker.output)
    assert found, worker.output
    return int(found.group(1))


def _held(port: int, queue: str) -> int:
    """Running + parked tasks of ``queue`` according to the worker's /metrics."""
    _, text = _get(port, "/metrics")
    total = 0
    for name in ("conveyor_tasks_in_flight", "conveyor_tasks_parked"):
        found = re.search(rf'^{name}{{queue="{queue}"}} (\d+)$', text, re.MULTILINE)
        total += int(found.group(1)) if found else 0
    return total


def _active(client: SyncClient, queue: str) -> int:
    """Tasks of ``queue`` the server counts in flight (ACTIVE)."""
    return sum(q.counts.get(TaskState.ACTIVE, 0) for q in client.admin.list_queues() if q.name == queue)


def _enqueue(client: SyncClient, queue: str, seconds: float | str, n: int = 1) -> list[str]:
    return [client.enqueue("slow", str(seconds).encode(), queue=queue, retention=KEEP).id for _ in range(n)]


def _done(client: SyncClient, ids: list[str], timeout: float) -> None:
    def all_done() -> bool:
        return all(client.get_task(i).state is TaskState.COMPLETED for i in ids)

    wait_until(all_done, timeout=timeout, interval=0.1, what=f"{len(ids)} tasks to complete")


def test_dedicated_pool_serves_its_queue_while_another_queue_is_backlogged(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """--pool fast:a:1 while b's slots are busy on 60 s tasks: a's tasks run at once; drain covers both."""
    with SyncClient(server.url) as client:
        b_ids = _enqueue(client, "b", 60, n=8)
        args = ("-q", "a=1", "-q", "b=1", "--pool", "fast:a:1", "--processes", "2", "--grace", "1s")
        args += ("--concurrency", "4")  # 2 slots per child: the counts below are about pools, not defaults
        worker = _worker(worker_factory, tmp_path, server.url, *args, "--metrics-port", "0")
        port = _metrics_port(worker)
        wait_until(lambda: len(_marks(tmp_path, "start", "b")) == 2, timeout=30, what="b to fill its pool")
        held = _held(port, "b")  # what this worker says it holds on b: running + parked
        assert held == _active(client, "b") == 2  # before: the server counted 4 (2 of them parked unseen)
        a_ids = _enqueue(client, "a", 0.01, n=3)
        _done(client, a_ids, timeout=15)  # before one session per pool: never, b held every credit
        assert len(_marks(tmp_path, "start", "b")) == 2  # nothing pre-empted, nothing extra started
        sessions = sorted((s.queues, s.concurrency) for s in client.admin.list_sessions())
        assert sessions == [(("a",), 2), (("b",), 2)]  # one session per pool, concurrency = its capacity
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        back = [client.get_task(i) for i in b_ids]
        assert {(t.state, t.retried) for t in back} == {(TaskState.PENDING, 0)}  # released, not burned


def test_shared_pool_lends_idle_slots_and_a_freed_slot_goes_to_the_queue_below_its_share(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """-q a=3 -q b=1 on 4 slots: a b burst holds all 4 until they end; the first freed slot goes to a."""
    with SyncClient(server.url) as client:
        first = _enqueue(client, "b", "gate:release")
        _enqueue(client, "b", 60, n=5)
        args = ("-q", "a=3", "-q", "b=1", "--processes", "1", "--concurrency", "4", "--grace", "1s")
        worker = _worker(worker_factory, tmp_path, server.url, *args)
        wait_until(lambda: len(_marks(tmp_path, "start")) == 4, timeout=30, what="b to borrow all 4 slots")
        assert first[0] in {m[1] for m in _marks(tmp_path, "start")}
        _enqueue(client, "a", 60, n=4)
        (tmp_path / "release").touch()  # only now does one b task end
        _done(client, first, timeout=30)
        wait_until(lambda: len(_marks(tmp_path, "start")) >= 5, timeout=15, what="the freed slot to be used")
        starts = _marks(tmp_path, "start")
        assert [m[2] for m in starts[:5]] == ["b", "b", "b", "b", "a"]
        assert [m[1] for m in _marks(tmp_path, "done")] == first  # the other b tasks keep their slots
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0


def test_reload_and_metrics_cover_every_pool(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """SIGHUP reloads the children of both pools; /metrics shows every pool's session and queue."""
    args = ("-q", "a=1", "-q", "b=1", "--pool", "fast:a:1", "--processes", "2", "--metrics-port", "0")
    worker = _worker(worker_factory, tmp_path, server.url, *args)
    port = _metrics_port(worker)
    (tmp_path / "rtapp.py").write_text(APP.replace('VERSION = "v1"', 'VERSION = "v2"'))
    worker.signal(signal.SIGHUP)
    worker.wait_for("reloaded")
    with SyncClient(server.url) as client:
        ids = _enqueue(client, "a", 0.01) + _enqueue(client, "b", 0.01)
        _done(client, ids, timeout=30)
    assert {m[2]: m[4] for m in _marks(tmp_path, "done")} == {"a": "v2", "b": "v2"}
    status, text = _get(port, "/metrics")
    assert status == 200
    assert 'conveyor_session_up{pool="fast"} 1' in text and 'conveyor_session_up{pool="default"} 1' in text
    assert 'conveyor_tasks_total{type="slow",queue="a",outcome="success"} 1' in text
    assert 'conveyor_tasks_total{type="slow",queue="b",outcome="success"} 1' in text
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_readyz_follows_every_session_and_healthz_survives_a_dead_server(
    tmp_path: Path, worker_factory: Factory
) -> None:
    """/readyz: 200 once both pools' sessions are up, 503 once the server is killed; /healthz stays 200."""
    with ServerProcess(FAST_ARGS) as srv:
        args = ("--pool", "fast:a:1", "-q", "b=1", "--processes", "2", "--metrics-port", "0")
        worker = _worker(worker_factory, tmp_path, srv.url, *args, established=False)
        port = _metrics_port(worker)
        wait_until(lambda: _get(port, "/readyz") == (200, "ok\n"), timeout=30, what="readyz 200")
        assert _get(port, "/healthz") == (200, "ok\n")
        srv.kill()
        _, reason = wait_until(
            lambda: (r := _get(port, "/readyz"))[0] == 503 and r, timeout=15, what="readyz 503"
        )
        assert re.match(r"pool (fast|default): session ", reason), reason
        assert _get(port, "/healthz") == (200, "ok\n")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_readyz_is_503_while_the_server_is_unreachable(tmp_path: Path, worker_factory: Factory) -> None:
    """No server at the URL: the worker keeps retrying; /readyz says why it is not ready, /healthz is 200."""
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    args = ("--processes", "1", "--metrics-port", "0", "--metrics-host", "127.0.0.1")
    worker = _worker(worker_factory, tmp_path, url, *args, established=False)
    port = _metrics_port(worker)
    worker.wait_for("cannot connect")
    status, reason = _get(port, "/readyz")
    assert status == 503 and reason.startswith("pool default: session "), reason
    assert _get(port, "/healthz") == (200, "ok\n")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert "established" not in worker.output


def test_readyz_in_process_mode(tmp_path: Path, server: ServerProcess, worker_factory: Factory) -> None:
    """--processes 0: one session, no children; /readyz is 200 once it is established, 503 while draining."""
    args = ("--processes", "0", "--metrics-port", "0", "--grace", "30s")
    worker = _worker(worker_factory, tmp_path, server.url, *args)
    port = _metrics_port(worker)
    wait_until(lambda: _get(port, "/readyz") == (200, "ok\n"), timeout=15, what="readyz 200")
    with SyncClient(server.url) as client:
        [task_id] = _enqueue(client, "default", "gate:release")
        wait_until(lambda: _marks(tmp_path, "start"), timeout=15, what="the task to start")
        worker.signal(signal.SIGTERM)  # drains: the gated task holds the drain open
        wait_until(lambda: _get(port, "/readyz") == (503, "draining\n"), timeout=15, what="readyz 503")
        assert _get(port, "/healthz") == (200, "ok (draining)\n")
        (tmp_path / "release").touch()
        assert worker.wait(30) == 0
        assert client.get_task(task_id).state is TaskState.COMPLETED
