"""File size of the durable store per 100,000 completed tasks, with and without retention.

Used by ``server_bench.py --db``. Each variant starts a fresh ``--db`` server
(``--reap-interval 1s``), feeds it ``tasks`` no-op tasks in EnqueueBatch(1000)
calls while a raw session completes them (the backlog is kept under 5,000 so the
file measures completed rows, not a queue), waits two reaper passes, stops the
server cleanly (the WAL is checkpointed into the file) and scales the file size
to 100,000 tasks. SQLite files do not shrink: the size is the high-water mark.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_server_min.testing import ServerProcess

__all__ = ["store_sizes"]

VARIANTS = (
    ("without retention (completed rows purged by the reaper)", None),
    ("with retention 1h (every completed row kept)", 3600),
)


def store_sizes(
    tasks: int, folder: str, consumer: Callable[..., Any], client: Callable[[str], Any], queue: str
) -> list[tuple[str, int]]:
    """(label, bytes per 100,000 completed tasks) for each variant."""
    out = []
    for label, retention in VARIANTS:
        path = Path(folder) / f"size-{retention or 0}.db"
        server = ServerProcess(["--dev", "--db", str(path), "--reap-interval", "1s"])
        url = server.start()
        try:
            asyncio.run(_feed(url, tasks, retention, consumer=consumer, client=client, queue=queue))
        finally:
            code = server.stop()
            if server.proc is not None and server.proc.stdout is not None:
                server.proc.stdout.close()
        if code:
            raise SystemExit(f"size server exited with {code}")
        wal = path.with_name(path.name + "-wal")
        size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        out.append((label, size * 100_000 // tasks))
    return out


async def _feed(
    url: str, tasks: int, retention: int | None, *,
    consumer: Callable[..., Any], client: Callable[[str], Any], queue: str,
) -> None:  # fmt: skip
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    raw = consumer(host, int(port), 256, tasks)
    runner = asyncio.ensure_future(raw.run())
    stub = client(url)
    item = pb.EnqueueRequest(queue=queue, type="noop", payload=b"{}")
    if retention:
        item.retention.seconds = retention
    batch = pb.EnqueueBatchRequest(tasks=[item] * 1000)
    for sent in range(1000, tasks + 1, 1000):
        while raw.done < sent - 5000:  # noqa: ASYNC110 - pacing on the consumer's plain counter
            await asyncio.sleep(0.005)
        await stub.enqueue_batch(batch)
    await runner
    await asyncio.sleep(2.5)  # two reaper passes purge what retention allows
