"""Dramatiq at its defaults (one process per CPU x 8 threads), Redis broker."""

from __future__ import annotations

import os

import dramatiq
from common import cpu, mark, started
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=os.environ.get("PEERS_BROKER", "redis://127.0.0.1:6379/0")))


@dramatiq.actor
def noop() -> None:
    mark("noop")


@dramatiq.actor
def lat(sent: float) -> None:
    started(sent)


@dramatiq.actor(actor_name="cpu")
def cpu_task() -> None:
    cpu()
