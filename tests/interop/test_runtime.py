"""`conveyor worker` (supervisor + children) against conveyord: outcomes, weights, pools, SIGTERM drain."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from conveyor_sdk.client import Client, task
from conveyor_sdk.types import TaskState
from tests.interop._app import LEDGER
from tests.interop._app import ledger as read_ledger
from tests.runtime._worker_proc import WorkerProc
from tests.sdk_worker._helpers import wait_state

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.interop._app:app"


async def backlog(url: str, n: int) -> tuple[list[str], list[str]]:
    async with Client(url) as client:
        a = await client.enqueue_batch(
            [task("rt:a", {"sleep": 0.05}, queue="wa", retention=3600) for _ in range(n)]
        )
        b = await client.enqueue_batch(
            [task("rt:b", {"sleep": 0.05}, queue="wb", retention=3600) for _ in range(n)]
        )
    return [r.task.id for r in a if r.task], [r.task.id for r in b if r.task]


async def completed(url: str, ids: list[str]) -> None:
    async with Client(url) as client:
        for tid in ids:
            await wait_state(client, tid, TaskState.COMPLETED, timeout=90)


def test_weighted_share_and_sigterm_drain(cv_url: str, tmp_path: Path) -> None:
    """-q wa=3 -q wb=1, concurrency 4: wa gets 0.75±0.05 of the first 40 starts; SIGTERM exits 0.

    Counted in the order the handlers started (each appends to a ledger file), not by
    conveyord's ``started_at``, which is when the server handed the task out.
    """
    a, b = asyncio.run(backlog(cv_url, 60))
    ledger = tmp_path / "starts.txt"
    args = [APP, "--server", cv_url, "-q", "wa=3", "-q", "wb=1", "--concurrency", "4", "--processes", "4"]
    proc = WorkerProc(ROOT, args, env={LEDGER: str(ledger)}).start()
    try:
        asyncio.run(completed(cv_url, a + b))
    finally:
        proc.signal(signal.SIGTERM)
        code = proc.wait(60)
    order = [q for q, _ in read_ledger(str(ledger))]
    share = order[:40].count("wa") / 40
    print(f"runtime wa share of first 40 handler starts against conveyord: {share:.3f}")
    assert code == 0, proc.output[-2000:]
    assert len(order) >= 120, f"{len(order)} handler starts for 120 tasks"
    assert abs(share - 0.75) <= 0.05 + 1e-9, (
        f"wa share {share:.3f}, want 0.75±0.05: {''.join(q[1] for q in order[:40])}"
    )


def test_pools_and_skip_outcome(cv_url: str) -> None:
    """Two explicit pools each serve their queue; a SkipRetry task is archived without retry."""
    args = [APP, "--server", cv_url, "--pool", "pa:wa:1", "--pool", "pb:wb:1"]
    proc = WorkerProc(ROOT, args).start()

    async def main() -> None:
        async with Client(cv_url) as client:
            ia = await client.enqueue("rt:a", {}, queue="wa", retention=3600)
            ib = await client.enqueue("rt:b", {}, queue="wb", retention=3600)
            sk = await client.enqueue("rt:skip", {}, queue="wa", retention=3600)
            await wait_state(client, ia.id, TaskState.COMPLETED)
            await wait_state(client, ib.id, TaskState.COMPLETED)
            info = await wait_state(client, sk.id, TaskState.ARCHIVED)
            assert info.retried == 0 and "refused" in info.last_error

    try:
        asyncio.run(main())
    finally:
        proc.signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, proc.output[-2000:]
