"""A worker process for the signal tests: ``python -m tests.sdk_worker._signal_worker URL GRACE SECONDS``."""

from __future__ import annotations

import logging
import sys
import threading

from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker


def main() -> None:
    url, grace, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    reg = Registry()

    @reg.handler("sig")
    def handler(task: TaskData, ctx: TaskContext) -> bytes:
        print(f"STARTED {task.id}", flush=True)
        ctx.wait_cancelled(seconds)
        ctx.raise_if_cancelled()
        return b"done"

    Worker(url, grace=grace, concurrency=2).run_sync(reg)
    handler_threads = [t.name for t in threading.enumerate() if t.name.startswith("conveyor-handler")]
    print(f"RETURNED threads={len(handler_threads)}", flush=True)


if __name__ == "__main__":
    main()
