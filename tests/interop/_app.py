"""The App that `conveyor worker` runs in the interop runtime tests."""

from __future__ import annotations

import os
import time

from conveyor_sdk.app import App
from conveyor_sdk.worker import SkipRetry, TaskContext

app = App()
LEDGER = "INTEROP_LEDGER"  # a file each handler appends "QUEUE MONOTONIC" to as it starts


def _record(queue: str) -> None:
    path = os.environ.get(LEDGER)
    if path:  # O_APPEND writes of one short line: whole lines, in the order the handlers started
        with open(path, "a") as out:  # monotonic: one system-wide clock, comparable across processes
            out.write(f"{queue} {time.monotonic():.6f}\n")


def ledger(path: str) -> list[tuple[str, float]]:
    """The (queue, start time) lines a worker's handlers wrote, in start order."""
    try:
        with open(path) as src:
            return [(q, float(t)) for q, t in (line.split() for line in src if line.endswith("\n"))]
    except FileNotFoundError:
        return []


@app.task("rt:a", queue="wa")
def run_a(payload: dict[str, float], ctx: TaskContext) -> str:
    _record("wa")
    time.sleep(payload.get("sleep", 0.02))
    return "a"


@app.task("rt:b", queue="wb")
def run_b(payload: dict[str, float], ctx: TaskContext) -> str:
    _record("wb")
    time.sleep(payload.get("sleep", 0.02))
    return "b"


@app.task("rt:skip", queue="wa")
def skip(payload: dict[str, float], ctx: TaskContext) -> None:
    raise SkipRetry("refused")


@app.task("cl:job", queue="cl")
def cluster_job(payload: dict[str, float], ctx: TaskContext) -> None:
    _record("cl")
    time.sleep(payload.get("sleep", 0.05))
