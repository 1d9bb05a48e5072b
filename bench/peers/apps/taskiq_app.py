"""Taskiq at its defaults (2 worker processes, asyncio), Redis streams broker."""

from __future__ import annotations

import os

from common import cpu, mark, started
from taskiq_redis import RedisStreamBroker

broker = RedisStreamBroker(os.environ.get("PEERS_BROKER", "redis://127.0.0.1:6379/0"))


@broker.task
async def noop() -> None:
    mark("noop")


@broker.task
async def lat(sent: float) -> None:
    started(sent)


@broker.task(task_name="cpu")
def cpu_task() -> None:
    cpu()
