"""Worker throughput and CPU per task: our Worker vs a grpcio asyncio baseline worker.

Both workers drain the same number of pre-enqueued no-op tasks from a fresh reference
server (``python -m conveyor_server_min``, dev mode) at the same concurrency. We report
tasks/s (wall) and worker-side CPU microseconds per task (this process only: the
server runs in its own process). The baseline speaks the same session protocol with
``grpc.aio`` (Hello, heartbeats from Welcome, one asyncio task per Dispatch running a
no-op handler, one Result per Dispatch).

Run:  .venv/bin/python bench/worker_bench.py [--tasks 5000] [--concurrency 64] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.client import Client, task
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker
from conveyor_server_min.testing import ServerProcess

SESSION = "/conveyor.v1.WorkerService/Session"


async def enqueue_all(url: str, n: int) -> None:
    async with Client(url) as client:
        for start in range(0, n, 1000):
            items = [
                task("noop", b"", content_type="application/octet-stream")
                for _ in range(min(1000, n - start))
            ]
            await client.enqueue_batch(items)


async def ours(url: str, n: int, concurrency: int) -> None:
    done = asyncio.Event()
    count = 0
    reg = Registry()

    @reg.handler("noop")
    async def noop(t: TaskData, ctx: TaskContext) -> None:
        nonlocal count
        count += 1
        if count >= n:
            done.set()

    worker = Worker(url, concurrency=concurrency, grace=5)
    run = asyncio.create_task(worker.run(reg))
    await done.wait()
    worker.stop()
    await run


async def grpcio_baseline(url: str, n: int, concurrency: int) -> None:
    channel = grpc.aio.insecure_channel(url.split("://", 1)[1])
    call = channel.stream_stream(
        SESSION, request_serializer=pb.WorkerMessage.SerializeToString,
        response_deserializer=pb.ServerMessage.FromString,
    )()  # fmt: skip
    hello = pb.WorkerMessage()
    hello.hello.queues["default"] = 1
    hello.hello.concurrency = concurrency
    hello.hello.sdk_version = "grpcio-baseline"
    await call.write(hello)
    count = 0
    done = asyncio.Event()
    write_lock = asyncio.Lock()  # grpc.aio allows one outstanding write per call
    in_flight: set[str] = set()
    tasks: set[asyncio.Task[None]] = set()

    async def handle(tid: str) -> None:
        nonlocal count
        await asyncio.sleep(0)  # the no-op handler
        res = pb.WorkerMessage()
        res.result.task_id = tid
        res.result.outcome = pb.TASK_OUTCOME_SUCCESS
        async with write_lock:
            await call.write(res)
        in_flight.discard(tid)
        count += 1
        if count >= n:
            done.set()

    async def heartbeat(interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            hb = pb.WorkerMessage()
            hb.heartbeat.active_task_ids.extend(in_flight)
            async with write_lock:
                await call.write(hb)

    async def read() -> None:
        async for msg in call:
            kind = msg.WhichOneof("frame")
            if kind == "welcome":
                tasks.add(
                    asyncio.create_task(heartbeat(msg.welcome.heartbeat_interval.ToNanoseconds() / 1e9))
                )
            elif kind == "dispatch":
                in_flight.add(msg.dispatch.task.id)
                t = asyncio.create_task(handle(msg.dispatch.task.id))
                tasks.add(t)
                t.add_done_callback(tasks.discard)

    reader = asyncio.create_task(read())
    await done.wait()
    async with write_lock:
        await call.done_writing()
    for t in [*tasks, reader]:
        t.cancel()
    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
        await asyncio.gather(*tasks, reader)
    await channel.close()


def measure(fn: Callable[[str, int, int], Awaitable[None]], n: int, concurrency: int) -> dict[str, float]:
    with ServerProcess(["--dev"]) as server:
        asyncio.run(enqueue_all(server.url, n))
        cpu0, wall0 = time.process_time(), time.perf_counter()
        asyncio.run(asyncio.wait_for(fn(server.url, n, concurrency), 300))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    if server.proc is not None and server.proc.stdout is not None:
        server.proc.stdout.close()
    return {"tasks_per_s": n / wall, "cpu_us_per_task": cpu / n * 1e6, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    runners = {"conveyor Worker": ours, "grpcio baseline": grpcio_baseline}
    print(f"no-op tasks: {args.tasks}, concurrency {args.concurrency}, best of {args.rounds} rounds")
    print(f"{'worker':<18}{'tasks/s':>10}{'CPU us/task':>14}{'wall s':>9}")
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.rounds):
        for name, fn in runners.items():
            r = measure(fn, args.tasks, args.concurrency)
            print(f"  round: {name:<16}{r['tasks_per_s']:>10.0f}{r['cpu_us_per_task']:>14.1f}", flush=True)
            if name not in best or r["cpu_us_per_task"] < best[name]["cpu_us_per_task"]:
                best[name] = r
    for name, r in best.items():
        print(f"{name:<18}{r['tasks_per_s']:>10.0f}{r['cpu_us_per_task']:>14.1f}{r['wall_s']:>9.2f}")
    ratio = best["conveyor Worker"]["cpu_us_per_task"] / best["grpcio baseline"]["cpu_us_per_task"]
    print(f"CPU per task, ours / grpcio: {ratio:.2f} (target <= 1.00)")


if __name__ == "__main__":
    main()
