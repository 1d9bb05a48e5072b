"""The in-process ``Worker`` at its defaults: ``python ours_inproc.py URL QUEUE noop|cpu [CONCURRENCY]``."""

from __future__ import annotations

import sys

import ours_app

from conveyor_sdk.worker import Worker

if __name__ == "__main__":
    url, queue, phase = sys.argv[1:4]
    registry = ours_app.cpu_app if phase == "cpu" else ours_app.app
    if len(sys.argv) > 4:  # an explicit concurrency, for before/after rows
        Worker(url, queues={queue: 1}, concurrency=int(sys.argv[4])).run_sync(registry)
    else:
        Worker(url, queues={queue: 1}).run_sync(registry)
