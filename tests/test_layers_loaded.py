"""The layer map, proved by what a fresh interpreter loads (``sys.modules``), not only by the source.

Each layer's modules are imported together in a new process; then a producer, a worker and a
reference server are used for real (a task enqueued, run and read back) and what each process
loaded, function-level imports included, is checked against the map in ``tests/_layers.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conveyor_sdk.client import Client
from conveyor_server_min.testing import ServerProcess
from tests._layers import GENERATED, MAY_IMPORT, ROOT, layer_of, loaded_violations, module_files
from tests.conftest import FAST_ARGS

_IMPORT_TIME = re.compile(r"^import time:\s+\d+\s+\|\s+\d+\s+\|\s*(\S+)\s*$")


def _loaded_by(code: str) -> list[str]:
    """``sys.modules`` of a fresh interpreter after it ran ``code``."""
    script = textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    loaded: list[str] = json.loads(run.stdout.strip().splitlines()[-1])
    return loaded


def _imported_at_runtime(output: list[str]) -> set[str]:
    """Module names from a process run with ``PYTHONPROFILEIMPORTTIME=1`` (one line per import)."""
    return {m.group(1) for line in output if (m := _IMPORT_TIME.match(line.rstrip("\n")))}


def _layer_modules(place: str) -> list[str]:
    return sorted(
        name
        for name in module_files()
        if layer_of(name) == place and not name.startswith(GENERATED) and not name.endswith("__main__")
    )


@pytest.mark.parametrize("place", sorted(set(MAY_IMPORT) - {"top"}))
def test_importing_a_whole_layer_loads_nothing_above_it(place: str) -> None:
    """Every module of the layer, imported in one fresh interpreter, pulls in no module of a layer
    it may not import, and none of the libraries kept for the layers above (typer, the dashboard's)."""
    modules = _layer_modules(place)
    assert modules, place
    loaded = _loaded_by("".join(f"import {name}\n" for name in modules))
    assert set(modules) <= set(loaded)
    assert loaded_violations(loaded, place) == []


def test_a_producer_in_use_loads_no_worker_runtime_server_or_cli(server_url: str) -> None:
    """``Client`` and ``SyncClient`` enqueue and read a task back; the process never loaded the
    worker, the runtime, the server, the CLI or typer (issue 29: it used to load the registry)."""
    loaded = _loaded_by(
        f"""
        import asyncio
        from conveyor_sdk.client import Client, SyncClient

        async def main():
            async with Client({server_url!r}) as client:
                info = await client.enqueue("layers:probe", {{"n": 1}})
                assert (await client.get_task(info.id)).id == info.id

        asyncio.run(main())
        with SyncClient({server_url!r}) as client:
            info = client.enqueue("layers:probe", {{"n": 2}})
            assert client.get_task(info.id).id == info.id
        """
    )
    assert "conveyor_sdk._client.transport" in loaded
    assert loaded_violations(loaded, "client") == []


def test_a_worker_in_use_loads_no_client_runtime_server_or_cli(server_url: str) -> None:
    """A ``Worker`` runs one task to its result; the process never loaded the client, the runtime,
    the server, the CLI or typer."""

    async def enqueue() -> str:
        async with Client(server_url) as client:
            return (await client.enqueue("layers:probe", {"n": 1})).id

    task_id = asyncio.run(enqueue())
    loaded = _loaded_by(
        f"""
        import asyncio
        from conveyor_sdk.worker import Registry, Worker

        async def main():
            registry, ran = Registry(), asyncio.Event()

            @registry.handler("layers:probe")
            async def probe(task, ctx):
                assert task.id == {task_id!r}
                ran.set()
                return b"ok"

            worker = Worker({server_url!r}, concurrency=1)
            running = asyncio.create_task(worker.run(registry))
            await asyncio.wait_for(ran.wait(), 30)
            worker.stop()
            await asyncio.wait_for(running, 30)

        asyncio.run(main())
        """
    )
    assert "conveyor_sdk._worker.driver" in loaded
    assert loaded_violations(loaded, "worker") == []


def test_a_serving_reference_server_loads_only_kernel_and_engine() -> None:
    """``python -m conveyor_server_min`` serves unary calls and a worker session; every module it
    imported, before and after start-up, is protocol, kernel or server: no typer, no CLI, no
    dashboard, no SDK client or worker (``PYTHONPROFILEIMPORTTIME`` lists each import as it runs)."""
    proc = ServerProcess(FAST_ARGS, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    proc.start()
    try:
        _run_one_task_against(proc.url)
    finally:
        code = proc.stop()
    assert code == 0, "".join(proc.output[-20:])
    imported = _imported_at_runtime(proc.output)
    assert {"conveyor_server_min._engine.engine", "conveyor_server_min._services.session"} <= imported
    assert loaded_violations(imported, "server") == []


def _run_one_task_against(url: str) -> None:
    """Enqueue over the producer client, run it on an in-process worker, read the result back."""
    from conveyor_sdk.types import TaskState
    from conveyor_sdk.worker import Registry, Worker
    from tests._util import eventually

    async def main() -> None:
        registry = Registry()

        @registry.handler("layers:probe")
        async def probe(task: object, ctx: object) -> bytes:
            return b"ok"

        worker = Worker(url, concurrency=1)
        running = asyncio.create_task(worker.run(registry))
        async with Client(url) as client:
            info = await client.enqueue("layers:probe", {"n": 1}, retention=60)

            async def completed() -> bool:
                return (await client.get_task(info.id)).state == TaskState.COMPLETED

            assert await eventually(completed, timeout=30, what="probe task completed")
        worker.stop()
        await asyncio.wait_for(running, 30)

    asyncio.run(main())


def test_the_loaded_module_checks_catch_a_violation() -> None:
    """The same checks on a process that does load what it must not: each is reported."""
    loaded = _loaded_by("import conveyor_sdk.client, conveyor_sdk._worker.registry, typer")
    found = loaded_violations(loaded, "client")
    assert "conveyor_sdk._worker.registry (worker)" in found and "typer" in found
    assert [
        m for m in loaded_violations(_loaded_by("import conveyor_sdk._protocol.session, asyncio"), "protocol")
    ]
    assert loaded_violations(_loaded_by("import conveyor_cli.server_cmd"), "server") != []
    # transport is the server's layer, but not the worker's session stream within it
    assert loaded_violations(["conveyor_sdk._transport.eventloop"], "server") == []
    assert loaded_violations(["conveyor_sdk._transport.session"], "server") == [
        "conveyor_sdk._transport.session (the worker's session stream)"
    ]


def test_the_import_time_listing_is_read() -> None:
    """A process run with ``PYTHONPROFILEIMPORTTIME=1`` that imports the worker is reported for the
    server layer: the listing the server test reads is parsed, not silently empty."""
    run = subprocess.run(
        [sys.executable, "-c", "import conveyor_sdk.worker"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
        timeout=60,
        check=True,
    )
    imported = _imported_at_runtime(run.stderr.splitlines(keepends=True))
    assert "conveyor_sdk._worker.registry (worker)" in loaded_violations(imported, "server")
