"""The supervisor's sessions against a scripted server: parked deliveries in the view, one fatal session.

The reference server never sends a session more than its concurrency and checks auth
the same way for every session, so the upstream behaviour (``concurrency`` credits per
declared queue) and a session-specific fatal error are played by a ScriptedPeer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from rich.console import Console

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._runtime.live import render
from conveyor_sdk._runtime.pools import PoolSpec
from conveyor_sdk._runtime.supervisor import EXIT_SESSION, Supervisor, SupervisorConfig
from conveyor_sdk._worker.registry import Registry
from conveyor_sdk.errors import Code
from conveyor_sdk.testing import PeerSession, ScriptedPeer
from tests._frames import welcome
from tests._util import eventually

APP = """
import asyncio
from conveyor_sdk._worker.registry import Registry

app = Registry()

@app.handler("t")
async def t(task, ctx):
    await asyncio.sleep(60)
"""


_welcome = partial(welcome, "S-parked", 3, 0.2)


def _dispatch(tid: str, queue: str) -> pb.ServerMessage:
    msg = pb.ServerMessage()
    msg.dispatch.task.CopyFrom(tpb.TaskEnvelope(id=tid, queue=queue, type="t"))
    return msg


async def _heartbeat_listing(sess: PeerSession, ids: list[str]) -> list[str]:
    """Wait (10 s at most) for a Heartbeat listing ``ids``; earlier ones may predate some dispatches."""
    async with asyncio.timeout(10):
        while True:
            msg = await sess.recv(10)
            assert msg is not None
            if msg.WhichOneof("frame") == "heartbeat" and sorted(msg.heartbeat.active_task_ids) == ids:
                return ids


def _queue_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c for c in line.replace("│", " ").split() if c]
        if len(cells) == 6 and cells[0] in ("a", "b"):
            rows[cells[0]] = cells[1:]
    return rows


async def _true(value: bool) -> bool:
    return value


def test_live_view_shows_parked_deliveries_in_flight(
    write_app: Callable[[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 deliveries on 2 slots (upstream style), a=1 b=1: each queue 1 running, 1 parked (its quota)."""
    folder = write_app("parkapp", APP)
    monkeypatch.chdir(folder)

    async def main() -> None:
        async with ScriptedPeer() as peer:
            config = SupervisorConfig(
                app="parkapp:app", queues={"a": 1, "b": 1}, concurrency=2, processes=1, server=peer.url
            )
            sup = Supervisor(config, Registry())
            sup.prepare()
            run = asyncio.create_task(sup.run())
            try:
                sess = await peer.accept(30)
                hello = await sess.recv()
                assert hello is not None and hello.hello.concurrency == 2
                await sess.send(_welcome())
                ids = ["a1", "a2", "b1", "b2"]
                for tid in ids:
                    await sess.send(_dispatch(tid, tid[0]))
                await eventually(lambda: _true(sup.in_flight() == {"a": (1, 1), "b": (1, 1)}), 15)
                server_count = await _heartbeat_listing(sess, ids)  # all 4 keep their leases
                console = Console(record=True, width=140)
                console.print(render(sup))
                rows = _queue_rows(console.export_text())
                # columns: pool, weight, running, parked, in flight
                assert rows == {"a": ["default", "1", "1", "1", "2"], "b": ["default", "1", "1", "1", "2"]}
                assert sum(int(r[-1]) for r in rows.values()) == len(server_count) == 4
                metrics = sup._metrics_text()
                assert 'conveyor_tasks_parked{queue="b"} 1' in metrics
                assert 'conveyor_session_up{pool="default"} 1' in metrics
            finally:
                sup._stop_worker(fast=True)
                await peer.aclose()
                await asyncio.wait_for(run, 30)
                sup.shutdown()

    asyncio.run(main())


def test_a_fatal_error_on_one_session_drains_the_others_and_exits_6(
    write_app: Callable[[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pools; the server refuses one session (permission denied): the other drains, exit code 6."""
    folder = write_app("parkapp", APP)
    monkeypatch.chdir(folder)

    async def main() -> None:
        async with ScriptedPeer() as peer:
            config = SupervisorConfig(
                app="parkapp:app",
                queues={"a": 1, "b": 1},
                concurrency=2,
                processes=2,
                server=peer.url,
                pools=(PoolSpec("fast", ("a",), 1),),
                grace=5.0,
            )
            sup = Supervisor(config, Registry())
            sup.prepare()
            run = asyncio.create_task(sup.run())
            try:
                kept, refused = await peer.accept(30), await peer.accept(30)
                for sess in (kept, refused):
                    hello = await sess.recv()
                    assert hello is not None and hello.hello.concurrency == 1
                await kept.send(_welcome())
                await eventually(lambda: _true(any(w.phase == "open" for w in sup.workers.values())), 15)
                await refused.end(Code.PERMISSION_DENIED, "not for you")
                await kept.wait_closed_by_client(15)  # drained: nothing ran, so it half-closes at once
                await kept.end()
                assert await asyncio.wait_for(run, 30) == EXIT_SESSION
            finally:
                if not run.done():
                    sup._stop_worker(fast=True)
                await peer.aclose()
                await asyncio.gather(run, return_exceptions=True)
                sup.shutdown()

    asyncio.run(main())
