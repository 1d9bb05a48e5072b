"""Celery at its defaults (prefork, one child per CPU, prefetch multiplier 4), Redis broker."""

from __future__ import annotations

import os

from celery import Celery
from common import cpu, mark, started

app = Celery("peers", broker=os.environ.get("PEERS_BROKER", "redis://127.0.0.1:6379/0"))


@app.task
def noop() -> None:
    mark("noop")


@app.task
def lat(sent: float) -> None:
    started(sent)


@app.task(name="cpu")
def cpu_task() -> None:
    cpu()
