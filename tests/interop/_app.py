"""The App that `conveyor worker` runs in the interop runtime tests."""

from __future__ import annotations

import time

from conveyor_sdk.app import App
from conveyor_sdk.worker import SkipRetry, TaskContext

app = App()


@app.task("rt:a", queue="wa")
def run_a(payload: dict[str, float], ctx: TaskContext) -> str:
    time.sleep(payload.get("sleep", 0.02))
    return "a"


@app.task("rt:b", queue="wb")
def run_b(payload: dict[str, float], ctx: TaskContext) -> str:
    time.sleep(payload.get("sleep", 0.02))
    return "b"


@app.task("rt:skip", queue="wa")
def skip(payload: dict[str, float], ctx: TaskContext) -> None:
    raise SkipRetry("refused")
