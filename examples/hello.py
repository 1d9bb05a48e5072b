"""A small app with async, sync and batch handlers plus a ``demo(client)`` producer.

Run it (starts an embedded reference server, a supervisor and one child per CPU)::

    conveyor worker examples.hello:app --demo
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import random

import msgspec

from conveyor_sdk.app import App
from conveyor_sdk.client import Client
from conveyor_sdk.worker import SkipRetry, TaskContext

app = App()
log = logging.getLogger("examples.hello")


class Greeting(msgspec.Struct):
    """Payload of ``hello:greet``."""

    name: str
    delay: float = 0.05


class Digest(msgspec.Struct):
    """Payload of ``hello:digest`` (CPU-bound: runs in a child process, off the supervisor)."""

    text: str
    rounds: int = 20_000


class Event(msgspec.Struct):
    """One member of a ``hello:events`` batch."""

    kind: str
    value: int


@app.task("hello:greet", queue="default", max_retry=3)
async def greet(payload: Greeting, ctx: TaskContext) -> str:
    """Async handler: runs on the child's event loop, many at a time."""
    ctx.report_progress(10, "warming up")
    await asyncio.sleep(payload.delay)
    if payload.name == "":
        raise SkipRetry("nobody to greet")
    ctx.report_progress(100, "done")
    log.info("greeted %s (attempt %d)", payload.name, ctx.retried + 1)
    return f"hello, {payload.name}"


@app.task("hello:digest", queue="default")
def digest(payload: Digest, ctx: TaskContext) -> str:
    """Sync handler: runs in a child's worker thread; checks for cancellation between rounds."""
    value = payload.text.encode()
    for i in range(payload.rounds):
        value = hashlib.sha256(value).digest()
        if i % 5000 == 0:
            ctx.raise_if_cancelled()
    log.info("digested %r in %d rounds", payload.text, payload.rounds)
    return value.hex()


@app.batch_task("hello:events", queue="default")
async def events(payloads: list[Event], ctx: TaskContext) -> None:
    """Batch handler: members of one aggregation group arrive together (or alone, as a batch of one).

    The server fires a group when it is full, or its grace period (10 s by default) after the last member.
    """
    total = sum(p.value for p in payloads)
    ctx.report_progress(100, f"{len(payloads)} events, total {total}")
    log.info("batch of %d events, total %d", len(payloads), total)


NAMES = ("Ada", "Grace", "Linus", "Barbara", "Ken", "Margaret")


async def demo(client: Client) -> None:
    """Producer used by ``conveyor worker examples.hello:app --demo``: a steady trickle of work."""
    for tick in itertools.count():
        await greet.enqueue(client, Greeting(name=random.choice(NAMES)))
        if tick % 2 == 0:
            await digest.enqueue(client, Digest(text=f"block {tick}", rounds=5_000))
        if tick % 3 == 0:
            await events.enqueue(client, Event(kind="click", value=tick), group=f"g{tick // 9}")
        await asyncio.sleep(0.2)
