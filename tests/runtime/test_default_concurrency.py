"""Default concurrency: what ``conveyor worker`` and ``Worker`` declare when no concurrency is given.

docs/runtime.md ("Defaults") promises 64 slots per child process (64 in-process) for an app
whose handlers are all async, and 8 per process once any handler is sync. The declared
figure is read where it matters, in the session's Hello, from a scripted server.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk._worker.registry import Registry
from conveyor_sdk.testing import ScriptedPeer
from conveyor_sdk.worker import Worker
from tests.runtime._worker_proc import WorkerProc

ASYNC_APP = """
from conveyor_sdk._worker.registry import Registry

app = Registry()

@app.handler("a")
async def a(task, ctx):
    return None
"""

MIXED_APP = (
    ASYNC_APP
    + """
@app.handler("s")
def s(task, ctx):
    return None
"""
)


async def _declared(start: Callable[[str], object]) -> int:
    """Start a worker against a scripted server; the concurrency its Hello declares."""
    async with ScriptedPeer() as peer:
        started = start(peer.url)
        sess = await peer.accept(60)
        hello = await sess.recv(30)
        assert hello is not None and hello.WhichOneof("frame") == "hello", started
        return hello.hello.concurrency


@pytest.mark.parametrize(
    "case",
    [
        (ASYNC_APP, ("--processes", "2"), 128, "64 slots each"),
        (MIXED_APP, ("--processes", "2"), 16, "8 slots each"),
        (ASYNC_APP, ("--processes", "0"), 64, None),
        (MIXED_APP, ("--processes", "0"), 8, None),
        (MIXED_APP, ("--processes", "2", "--concurrency", "6"), 6, "3 slots each"),
    ],
)
def test_cli_default_concurrency_follows_the_handlers(
    write_app: Callable[[str, str], Path],
    worker_factory: Callable[..., WorkerProc],
    case: tuple[str, tuple[str, ...], int, str | None],
) -> None:
    """Async-only: 64 per process (64 in-process); any sync handler: 8 per process; a flag wins."""
    source, args, declared, slots_line = case
    folder = write_app("defaultsapp", source)
    procs: list[WorkerProc] = []

    def start(url: str) -> WorkerProc:
        proc = worker_factory(folder, "defaultsapp:app", "--server", url, "-q", "q=1", *args)
        procs.append(proc)
        return proc

    assert asyncio.run(_declared(start)) == declared
    (proc,) = procs
    if slots_line is not None:
        proc.wait_for(slots_line)
    proc.signal(signal.SIGTERM)
    proc.wait(30)


def _registry(sync: bool) -> Registry:
    reg = Registry()

    @reg.handler("a")
    async def a(task: object, ctx: object) -> None:
        return None

    if sync:

        @reg.handler("s")
        def s(task: object, ctx: object) -> None:
            return None

    return reg


@pytest.mark.parametrize(("sync", "declared"), [(False, 64), (True, 8)])
def test_worker_default_concurrency_follows_the_registry(sync: bool, declared: int) -> None:
    """Worker() without concurrency declares 64 for async handlers only, 8 once one is sync."""
    worker = Worker("http://127.0.0.1:1", queues={"q": 1})

    async def main() -> int:
        runs: list[asyncio.Task[None]] = []

        def start(url: str) -> object:
            worker.servers = [url]  # the scripted server's address, known only now
            runs.append(asyncio.create_task(worker.run(_registry(sync))))
            return runs[0]

        try:
            return await _declared(start)
        finally:
            worker.stop(immediate=True)
            await asyncio.wait(runs, timeout=15)

    assert asyncio.run(main()) == declared
    assert worker.concurrency == declared


def test_worker_explicit_concurrency_is_kept() -> None:
    """Worker(concurrency=3) declares 3 whatever its handlers are."""
    worker = Worker("http://127.0.0.1:1", queues={"q": 1}, concurrency=3)

    async def main() -> int:
        runs: list[asyncio.Task[None]] = []

        def start(url: str) -> object:
            worker.servers = [url]
            runs.append(asyncio.create_task(worker.run(_registry(True))))
            return runs[0]

        try:
            return await _declared(start)
        finally:
            worker.stop(immediate=True)
            await asyncio.wait(runs, timeout=15)

    assert asyncio.run(main()) == 3
