"""Worker programs for ``bench/latency_bench.py``: each records when its handler starts.

Every handler's first line takes ``time.monotonic_ns()`` (CLOCK_MONOTONIC, the same clock
in every process on the machine) and appends ``<payload> <ns>`` to the file named by
``LAT_OUT``. The payload is the producer's sequence number as ASCII.

Run one directly:  python bench/_latency_workers.py ours|ours-uvloop|floor|conveyorq|grpc URL QUEUE
The runtime variant is ``conveyor worker bench._latency_workers:app`` (the module-level ``app``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable

_fd: int | None = None


def record(payload: bytes, t: int | None = None) -> None:
    """Append ``payload t_ns`` to LAT_OUT (opened once, O_APPEND, one write per line)."""
    if t is None:
        t = time.monotonic_ns()
    global _fd  # noqa: PLW0603 — one descriptor per process, opened on first use
    if _fd is None:
        _fd = os.open(os.environ["LAT_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, b"%s %d\n" % (payload, t))


def stamp_reads(stream_cls: type, clock: Callable[[], int]) -> list[int]:
    """Patch ``stream_cls._on_data`` (what the session socket's ``data_received`` runs) so that
    every read first stores ``clock()``; returns the one-item list that holds the last stamp.
    ``stream_cls`` is ``SessionStream`` of whichever source tree the caller imported."""
    read_ns = [0]
    original = stream_cls._on_data  # type: ignore[attr-defined]

    def on_data(self: object, data: bytes) -> None:
        read_ns[0] = clock()
        original(self, data)

    stream_cls._on_data = on_data  # type: ignore[attr-defined]
    return read_ns


def make_registry() -> object:
    """Our handler. Built on demand: conveyorq's interpreter must not import conveyor_sdk
    (both register the conveyor.v1 descriptors in protobuf's default pool)."""
    from conveyor_sdk.worker import Registry, TaskContext, TaskData

    reg = Registry()

    @reg.handler("lat")
    async def lat(t: TaskData, ctx: TaskContext) -> None:
        record(t.payload)

    return reg


def __getattr__(name: str) -> object:  # ``conveyor worker bench._latency_workers:app``
    if name == "app":
        return make_registry()
    raise AttributeError(name)


async def run_ours(url: str, queue: str) -> None:
    from conveyor_sdk.worker import Worker

    await Worker(url, queues={queue: 1}, concurrency=8).run(make_registry())  # type: ignore[arg-type]


async def run_floor(url: str, queue: str) -> None:
    """The floor: our Worker, but each task is stamped when its Dispatch's bytes reached Python.

    The stamp is taken on entry to the session socket's ``data_received`` (the protocol hands
    it ``SessionStream._on_data`` itself, so that is where the stamp goes), before any HTTP/2,
    protobuf or session work, and written by the (empty) handler one loop turn later. On an
    idle queue nothing else is read in between, so this is what any asyncio worker pays
    before its first line of Python runs: producer, server, kernel wake-up and the loop's read.
    """
    from conveyor_sdk._transport import session
    from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker

    read_ns = stamp_reads(session.SessionStream, time.monotonic_ns)
    reg = Registry()

    @reg.handler("lat")
    async def lat(t: TaskData, ctx: TaskContext) -> None:
        record(t.payload, read_ns[0])

    await Worker(url, queues={queue: 1}, concurrency=8).run(reg)


async def run_conveyorq(url: str, queue: str) -> None:
    from conveyorq import Mux, Worker  # the upstream SDK, installed in this interpreter

    mux = Mux()

    @mux.handler("lat")
    async def lat(task, ctx) -> None:  # type: ignore[no-untyped-def]
        record(task.payload)

    await Worker(url, queues={queue: 1}, concurrency=8).run(mux)


async def run_grpc(url: str, queue: str) -> None:
    """A minimal grpc.aio session worker (Hello, heartbeats, one task per Dispatch)."""
    import grpc

    from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

    channel = grpc.aio.insecure_channel(url.split("://", 1)[1])
    call = channel.stream_stream(
        "/conveyor.v1.WorkerService/Session",
        request_serializer=pb.WorkerMessage.SerializeToString,
        response_deserializer=pb.ServerMessage.FromString,
    )()
    hello = pb.WorkerMessage()
    hello.hello.queues[queue] = 1
    hello.hello.concurrency = 8
    hello.hello.sdk_version = "grpcio-baseline"
    await call.write(hello)
    lock = asyncio.Lock()
    running: set[str] = set()
    keep: set[asyncio.Task[None]] = set()

    async def handle(task: pb.TaskEnvelope) -> None:
        record(task.payload)
        res = pb.WorkerMessage()
        res.result.task_id = task.id
        res.result.outcome = pb.TASK_OUTCOME_SUCCESS
        async with lock:
            await call.write(res)
        running.discard(task.id)

    async def heartbeat(interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            hb = pb.WorkerMessage()
            hb.heartbeat.active_task_ids.extend(running)
            async with lock:
                await call.write(hb)

    async for msg in call:
        kind = msg.WhichOneof("frame")
        if kind == "welcome":
            interval = msg.welcome.heartbeat_interval.ToNanoseconds() / 1e9 or 10.0
            keep.add(asyncio.create_task(heartbeat(interval)))
        elif kind == "dispatch":
            running.add(msg.dispatch.task.id)
            t = asyncio.create_task(handle(msg.dispatch.task))
            keep.add(t)
            t.add_done_callback(keep.discard)


def main() -> None:
    kind, url, queue = sys.argv[1:4]
    runners = {"ours": run_ours, "ours-uvloop": run_ours, "floor": run_floor}
    runners |= {"conveyorq": run_conveyorq, "grpc": run_grpc}
    with contextlib.suppress(KeyboardInterrupt):
        if kind == "ours-uvloop":  # our Worker's blocking entry point, on uvloop
            from conveyor_sdk.worker import Worker

            Worker(url, queues={queue: 1}, concurrency=8).run_sync(make_registry(), loop="uvloop")  # type: ignore[arg-type]
        else:
            asyncio.run(runners[kind](url, queue))


if __name__ == "__main__":
    main()
