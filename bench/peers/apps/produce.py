"""A producer, run in the system's own interpreter: ``python produce.py SYSTEM ACTION N``.

ACTION ``fill``: enqueue N tasks of ``$PEERS_KIND`` (noop or cpu) as fast as the client allows
(not measured). ``seq``: N sequential single enqueues; prints JSON with wall and producer
CPU seconds. ``lat``: N idle-worker samples (enqueue one, wait until it started, pause).
Broker address in ``$PEERS_BROKER``, queue in ``$PEERS_QUEUE`` (servers of ours only).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import sys
import time
from collections.abc import Awaitable, Callable

from common import OUT

BROKER = os.environ.get("PEERS_BROKER", "")
QUEUE = os.environ.get("PEERS_QUEUE", "default")
Send = Callable[[str, float | None], Awaitable[None]]  # (kind, sent time for "lat")


async def ours() -> tuple[Send, Callable[[str, int], Awaitable[None]]]:
    from conveyor_sdk.client import Client, TaskSpec

    client = Client(BROKER)

    async def send(kind: str, sent: float | None) -> None:
        await client.enqueue(kind, repr(sent).encode() if sent is not None else b"", queue=QUEUE)

    async def fill(kind: str, n: int) -> None:
        for start in range(0, n, 1000):
            size = min(1000, n - start)
            await client.enqueue_batch([TaskSpec(kind, b"", queue=QUEUE) for _ in range(size)])

    return send, fill


async def conveyorq() -> tuple[Send, Callable[[str, int], Awaitable[None]]]:
    from conveyorq import Client, binary, new_task

    client = Client(BROKER)

    async def send(kind: str, sent: float | None) -> None:
        data = repr(sent).encode() if sent is not None else b""
        await client.enqueue(new_task(kind, binary(data)), queue=QUEUE)

    async def fill(kind: str, n: int) -> None:
        for _ in range(n):
            await send(kind, None)

    return send, fill


def _sync_sender(tasks: dict[str, Callable[..., object]]) -> Send:
    async def send(kind: str, sent: float | None) -> None:
        if sent is None:
            tasks[kind]()
        else:
            tasks[kind](sent)

    return send


async def celery() -> tuple[Send, Callable[[str, int], Awaitable[None]]]:
    import celery_app as m

    send = _sync_sender({"noop": m.noop.delay, "lat": m.lat.delay, "cpu": m.cpu_task.delay})
    return send, _loop_fill(send)


async def dramatiq() -> tuple[Send, Callable[[str, int], Awaitable[None]]]:
    import dramatiq_app as m

    send = _sync_sender({"noop": m.noop.send, "lat": m.lat.send, "cpu": m.cpu_task.send})
    return send, _loop_fill(send)


async def taskiq() -> tuple[Send, Callable[[str, int], Awaitable[None]]]:
    import taskiq_app as m

    await m.broker.startup()
    tasks = {"noop": m.noop, "lat": m.lat, "cpu": m.cpu_task}

    async def send(kind: str, sent: float | None) -> None:
        if sent is None:
            await tasks[kind].kiq()
        else:
            await tasks[kind].kiq(sent)

    return send, _loop_fill(send)


def _loop_fill(send: Send) -> Callable[[str, int], Awaitable[None]]:
    async def fill(kind: str, n: int) -> None:
        for _ in range(n):
            await send(kind, None)

    return fill


def _lines(path: str) -> int:
    try:
        with open(path, "rb") as fh:
            return fh.read().count(b"\n")
    except FileNotFoundError:
        return 0


async def latency(send: Send, n: int) -> None:
    path = os.path.join(OUT, "lat")
    rng = random.Random(7)
    for i in range(n):
        await asyncio.sleep(0.02 + rng.random() * 0.02)  # the worker is idle when the task arrives
        await send("lat", time.time())
        deadline = time.monotonic() + 30
        while _lines(path) <= i:
            if time.monotonic() > deadline:
                raise SystemExit(f"latency sample {i} never started")
            time.sleep(0.0005)  # noqa: ASYNC251 - a busy wait on purpose: no loop turn between polls


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def main() -> None:
    system, action, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    factory = {"ours": ours, "conveyorq": conveyorq, "celery": celery, "dramatiq": dramatiq, "taskiq": taskiq}
    send, fill = await factory[system]()
    if action == "fill":
        await fill(os.environ.get("PEERS_KIND", "noop"), n)
    elif action == "lat":
        await latency(send, n)
    elif action == "seq":
        await send("noop", None)  # connect and warm up outside the measurement
        cpu0, t0 = _cpu(), time.perf_counter()
        for _ in range(n):
            await send("noop", None)
        print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": _cpu() - cpu0}))
    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    asyncio.run(main())
    sys.stdout.flush()
    os._exit(0)  # some clients keep non-daemon threads or pools around; the work is done
