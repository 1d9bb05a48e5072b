"""3 conveyord nodes over Postgres: kill -9 the node a worker is on, under load; nothing is lost.

What is asserted is what conveyord allows: every acknowledged task completes, the producer keeps
at least 80% of its rate in the 5 s after the kill, and the killed node's worker runs tasks again
within RESUME_BOUND. The idle time itself is printed, not asserted below 3 s: with bare sessions
a surviving node took 3-9 s, or longer than 30 s, to welcome and feed a fresh session after a
kill -9 (docs/interop.md, "What conveyord does after a node is killed"), whatever the client does.
When conveyord fed *no* worker in RESUME_BOUND (the queue's dispatcher lived on the killed node),
the test is an xfail naming that, after checking the producer's rate: no client can do better.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from conveyor_sdk.client import Client
from conveyor_sdk.errors import ConveyorError
from conveyor_sdk.types import TaskState
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker
from tests.interop import _postgres
from tests.interop._app import LEDGER
from tests.interop._app import ledger as read_ledger
from tests.interop._conveyord import Conveyord
from tests.interop.conftest import binary
from tests.runtime._worker_proc import WorkerProc
from tests.sdk_worker._helpers import running, wait_state

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.interop._app:app"

RATE = 40.0  # producer target, tasks/s
# conveyord re-registers a gateway with its queue every 30 s and declares a dead member gone after
# ~13-30 s, so a worker idle that long is conveyord's doing (31 s and 34.5 s were seen).
RESUME_BOUND = 90.0


def stalled_cluster(after: list[int]) -> None:
    """Worker 0 was not fed again: fail, unless conveyord fed no surviving worker either.

    A queue whose dispatcher lived on the killed node feeds nobody until conveyord re-creates it
    (docs/interop.md); when no worker at all got a task in RESUME_BOUND, no client could have
    done better, and the test says so (xfail) instead of failing on conveyord's behalf.
    """
    if sum(after[1:]) <= 1:  # at most a leftover start right at the kill
        pytest.xfail(
            f"conveyord fed no worker in the {RESUME_BOUND:.0f} s after the kill (starts per worker:"
            f" {after}): its queue dispatcher lived on the killed node (docs/interop.md)"
        )


def _start_cluster(path: str) -> list[Conveyord]:
    """Three nodes (static discovery) over a fresh database; raises RuntimeError if one exits."""
    dsn = _postgres.fresh_database()
    nodes = [Conveyord(path, dsn=dsn, lease_ttl="2s", reap_interval="500ms") for _ in range(3)]
    peers = [n.ports[3] for n in nodes]
    for n in nodes:
        n.cluster_ports = peers
        n.launch()
    try:
        for n in nodes:
            n.wait_ready(90)
    except RuntimeError:
        for n in nodes:
            n.stop()
        raise
    return nodes


@pytest.fixture
def cluster() -> Iterator[list[Conveyord]]:
    """Three nodes over our own Postgres database; stopped at teardown.

    conveyord's cluster start-up sometimes fails on its own (a node exits with ``spawning
    scheduler singleton: ... connection refused`` or ``actor system is not running`` while its
    peers come up): that start is retried, at most twice, on fresh ports and a fresh database.
    """
    why = _postgres.unavailable()
    if why:
        pytest.skip(why)
    path = binary()
    assert path is not None
    failures: list[str] = []
    nodes: list[Conveyord] = []
    for _ in range(3):
        try:
            nodes = _start_cluster(path)
            break
        except RuntimeError as exc:
            failures.append(str(exc).splitlines()[-1][:300])
    if not nodes:
        raise AssertionError("conveyord's cluster did not start in 3 tries: " + " | ".join(failures))
    if failures:
        print(f"cluster start retried after: {failures}")
    try:
        yield nodes
    finally:
        for n in nodes:
            n.stop()


async def produce(
    urls: list[str], until: Callable[[], bool], acked: list[str], stamps: list[float], queue: str = "default"
) -> None:
    """Enqueue at RATE until ``until()``; record each acknowledged id and its time."""
    async with Client(urls, timeout=5.0) as client:
        start = time.monotonic()
        i = 0
        while not until():
            i += 1
            try:
                info = await client.enqueue("cl:job", {}, queue=queue, retention=3600)
                acked.append(info.id)
                stamps.append(time.monotonic())
            except ConveyorError:
                pass  # not acknowledged: not promised
            await asyncio.sleep(max(0.0, start + i / RATE - time.monotonic()))


def test_failover_under_load(cluster: list[Conveyord]) -> None:
    """In-process Workers: the killed node's worker runs tasks again, nothing is lost, rate >=80%."""
    urls = [n.url for n in cluster]
    ran: list[list[float]] = [[], [], []]
    workers = [Worker(urls[k:] + urls[:k], concurrency=4, task_log=False) for k in range(3)]
    victim_url: list[str] = []  # set at the kill
    back_at: list[float] = []  # worker 0's first start from another node (not a leftover delivery)

    def registry(k: int) -> Registry:
        reg = Registry()

        @reg.handler("cl:job")
        async def job(task: TaskData, ctx: TaskContext) -> None:
            now = time.monotonic()
            ran[k].append(now)
            if k == 0 and victim_url and workers[0].server != victim_url[0] and not back_at:
                back_at.append(now)
            await asyncio.sleep(0.05)

        return reg

    async def main() -> tuple[float, float, list[str]]:
        acked: list[str] = []
        stamps: list[float] = []
        async with running(workers[0], registry(0)), running(workers[1], registry(1)):  # noqa: SIM117
            async with running(workers[2], registry(2)):
                t0 = time.monotonic()
                state: dict[str, float] = {}

                def done() -> bool:  # 5 s of rate after the kill, then until worker 0 ran again
                    k = state.get("killed")
                    now = time.monotonic()
                    if k is None:
                        return now > t0 + 30
                    return now > k + 5 and (bool(back_at) or now > k + RESUME_BOUND)

                producer = asyncio.create_task(produce(urls[1:] + urls[:1], done, acked, stamps))
                await asyncio.sleep(0)
                while len(acked) < 80 or len(ran[0]) < 10:  # under load, and worker 0 is working
                    assert time.monotonic() < t0 + 20, f"no load before the kill: {len(acked)} acked"
                    await asyncio.sleep(0.05)
                victim = cluster[urls.index(workers[0].server)]  # the node worker 0 is on now
                victim_url.append(victim.url)
                killed = state["killed"] = time.monotonic()
                await asyncio.to_thread(victim.kill)
                await producer
                back = back_at[0] if back_at else None
                after = [sum(1 for t in r if t > killed) for r in ran]
                rate = sum(1 for t in stamps if killed <= t < killed + 5) / 5
                assert rate >= 0.8 * RATE, f"producer {rate:.1f}/s after the kill"
                if back is None:
                    stalled_cluster(after)
                assert back is not None, (
                    f"worker 0 ran no task within {RESUME_BOUND}s of the kill; starts after: {after}"
                )
                async with Client([u for u in urls if u != victim.url]) as client:
                    for tid in acked:
                        await wait_state(client, tid, TaskState.COMPLETED, timeout=60)
        return back - killed, rate, acked

    idle, rate, acked = asyncio.run(main())
    print(
        f"failover: worker 0 idle {idle:.2f}s after kill -9, producer {rate:.1f}/s of {RATE}/s,"
        f" {len(acked)} tasks"
    )
    assert rate >= 0.8 * RATE


STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*session \S+ established", re.M)


def _established(proc: WorkerProc) -> list[float]:
    """When the worker's sessions were established (its log's wall clock, as time.monotonic())."""
    offset = time.time() - time.monotonic()
    stamps = []
    for m in STAMP.finditer(proc.output):
        wall = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time, as logged
        stamps.append(wall - offset)
    return stamps


def _node_of(proc: WorkerProc, urls: list[str]) -> int:
    """The node a `conveyor worker` connected to last ("connecting to URL" log line)."""
    last = [m.group(1) for m in re.finditer(r"connecting to (http://\S+)", proc.output)]
    return urls.index(last[-1])


def test_runtime_failover_under_load(cluster: list[Conveyord], tmp_path: Path) -> None:
    """`conveyor worker --server a,b,c` processes (one per node first): kill -9 worker 0's node.

    Nothing acknowledged is lost, the producer keeps >=80% of RATE, and worker 0 runs tasks again
    within RESUME_BOUND; the idle time is printed (conveyord bounds it, see the module docstring).
    """
    urls = [n.url for n in cluster]
    ledgers = [str(tmp_path / f"worker{k}.txt") for k in range(3)]
    procs = []
    for k in range(3):
        args = [APP, "--server", ",".join(urls[k:] + urls[:k]), "-q", "cl", "--processes", "1"]
        args += ["--concurrency", "4"]
        procs.append(WorkerProc(ROOT, args, env={LEDGER: ledgers[k]}).start())
    try:
        for proc in procs:
            proc.wait_for("established", timeout=60)
        idle, rate, acked = asyncio.run(_runtime_scenario(cluster, urls, procs, ledgers))
    finally:
        for proc in procs:
            proc.signal(signal.SIGTERM)
        codes = [proc.wait(60) for proc in procs]
    print(
        f"runtime failover: worker 0 idle {idle:.2f}s after kill -9, producer {rate:.1f}/s of {RATE}/s,"
        f" {len(acked)} tasks, none lost"
    )
    assert codes == [0, 0, 0], [p.output[-1500:] for p in procs]
    assert rate >= 0.8 * RATE


async def _runtime_scenario(
    cluster: list[Conveyord], urls: list[str], procs: list[WorkerProc], ledgers: list[str]
) -> tuple[float, float, list[str]]:
    acked: list[str] = []
    stamps: list[float] = []
    state: dict[str, float] = {}
    t0 = time.monotonic()

    def resumed(after: float) -> float | None:
        """Worker 0's first start in a session established after ``after`` (not a leftover
        delivery of the killed node's session starting a few ms after the kill)."""
        fresh = [t for t in _established(procs[0]) if t > after]
        if not fresh:
            return None
        return next((s for _, s in read_ledger(ledgers[0]) if s >= fresh[0] - 0.002), None)

    def done() -> bool:  # 5 s of rate after the kill, then until worker 0 ran again (bounded)
        k, now = state.get("killed"), time.monotonic()
        if k is None:
            return now > t0 + 40
        return now > k + 5 and (resumed(k) is not None or now > k + RESUME_BOUND)

    producer = asyncio.create_task(produce(urls[1:] + urls[:1], done, acked, stamps, queue="cl"))
    while len(acked) < 80 or len(read_ledger(ledgers[0])) < 10:  # under load, worker 0 working
        assert time.monotonic() < t0 + 30, f"no load before the kill: {len(acked)} acked"
        await asyncio.sleep(0.05)
    victim = cluster[_node_of(procs[0], urls)]
    killed = state["killed"] = time.monotonic()
    await asyncio.to_thread(victim.kill)
    await producer
    starts = [[s for _, s in read_ledger(path) if s > killed] for path in ledgers]
    back = resumed(killed)
    rate = sum(1 for t in stamps if killed <= t < killed + 5) / 5
    assert rate >= 0.8 * RATE, f"producer {rate:.1f}/s after the kill"
    if back is None:
        stalled_cluster([len(s) for s in starts])
    assert back is not None, (
        f"worker 0 ran no task within {RESUME_BOUND}s of the kill; starts per worker after:"
        f" {[len(s) for s in starts]}\n{procs[0].output[-3000:]}"
    )
    async with Client([u for u in urls if u != victim.url]) as client:
        for tid in acked:  # nothing acknowledged is lost
            await wait_state(client, tid, TaskState.COMPLETED, timeout=90)
    return back - killed, rate, acked
