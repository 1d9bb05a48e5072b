"""A worker whose task answers 2 MiB: ``python -m tests.sdk_worker._big_result_worker URL GATE [PING WAIT]``.

The handler prints ``STARTED <id>``, waits until the file GATE exists, then returns 2 MiB (more
than a server's flow-control window), so a test can break the link before the Result is written.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import sys

from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker


def main() -> None:
    url, gate = sys.argv[1], pathlib.Path(sys.argv[2])
    keepalive = [float(v) for v in sys.argv[3:5]] or [5.0, 10.0]
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    reg = Registry()

    @reg.handler("big")
    async def big(task: TaskData, ctx: TaskContext) -> bytes:
        print(f"STARTED {task.id}", flush=True)
        while not gate.exists():  # noqa: ASYNC110, ASYNC240 - the test's go-ahead: a file, no event to share
            await asyncio.sleep(0.01)
        return b"x" * (2 << 20)

    Worker(url, keepalive_interval=keepalive[0], keepalive_timeout=keepalive[1]).run_sync(reg)
    print("RETURNED", flush=True)


if __name__ == "__main__":
    main()
