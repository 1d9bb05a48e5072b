"""An in-process conveyor_sdk Worker on a background thread, for CLI tests that need tasks to run."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

from conveyor_sdk.worker import Registry, Worker


@contextlib.contextmanager
def worker_thread(url: str, registry: Registry, queues: list[str] | Mapping[str, int]) -> Iterator[Worker]:
    """Serve ``queues`` while the block runs; then drain and require the thread to finish."""
    worker = Worker(url, queues=queues, concurrency=4, grace=5.0)
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            worker.run_sync(registry)
        except BaseException as exc:  # re-raised in the test thread below
            errors.append(exc)

    thread = threading.Thread(target=serve, name="cli-test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "worker thread did not stop"
        assert not errors, errors
