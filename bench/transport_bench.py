"""Benchmark: client CPU per task for the session transport vs a grpcio asyncio client (same run).

A grpcio server in a child process plays the Conveyor server: after Hello/Welcome
it keeps ``--inflight`` Dispatches outstanding and sends the next one for every
Result, ``--tasks`` in total. Each client (ours over gRPC, ours over Connect is
not possible against grpcio, so gRPC only; then grpcio.aio) answers every Dispatch
with a Result. We report wall time, tasks/s and the *client process* CPU time per
task; the server's CPU is in another process and not counted.

Run: .venv/bin/python bench/transport_bench.py [--tasks 20000] [--inflight 16]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time
from collections.abc import AsyncIterator
from typing import Any

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._transport import TransportOptions, open_session

HELLO = pb.WorkerMessage(hello=pb.Hello(concurrency=16, queues={"default": 1}, sdk_version="bench"))
PAYLOAD = b'{"user_id": 12345, "action": "resize", "size": [640, 480]}'


def _dispatch(i: int) -> pb.ServerMessage:
    task = tpb.TaskEnvelope(id=f"01J{i:023d}", queue="default", type="bench", payload=PAYLOAD)
    return pb.ServerMessage(dispatch=pb.Dispatch(task=task))


def _result(task_id: str) -> pb.WorkerMessage:
    return pb.WorkerMessage(result=pb.Result(task_id=task_id, outcome=pb.TASK_OUTCOME_SUCCESS))


def _serve(port_q: Any, tasks: int, inflight: int) -> None:
    import grpc

    async def session(
        requests: AsyncIterator[pb.WorkerMessage], context: Any
    ) -> AsyncIterator[pb.ServerMessage]:
        it = requests.__aiter__()
        await it.__anext__()
        yield pb.ServerMessage(welcome=pb.Welcome(session_id="bench"))
        sent = done = 0
        while sent < min(inflight, tasks):
            yield _dispatch(sent)
            sent += 1
        async for _ in it:
            done += 1
            if sent < tasks:
                yield _dispatch(sent)
                sent += 1
            if done == tasks:
                return

    async def main() -> None:
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            "conveyor.v1.WorkerService",
            {
                "Session": grpc.stream_stream_rpc_method_handler(
                    session,
                    request_deserializer=pb.WorkerMessage.FromString,
                    response_serializer=pb.ServerMessage.SerializeToString,
                )
            },
        )
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        port_q.put(port)
        await server.wait_for_termination()

    asyncio.run(main())


async def _ours(url: str) -> int:
    stream = await open_session(url, TransportOptions())
    async with stream:
        await stream.send(HELLO)
        n = 0
        while (msg := await stream.recv()) is not None:
            if msg.HasField("dispatch"):
                await stream.send(_result(msg.dispatch.task.id))
                n += 1
        return n


async def _grpcio(target: str) -> int:
    import grpc

    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.stream_stream(
            "/conveyor.v1.WorkerService/Session",
            request_serializer=pb.WorkerMessage.SerializeToString,
            response_deserializer=pb.ServerMessage.FromString,
        )()
        await call.write(HELLO)
        n = 0
        while (msg := await call.read()) is not grpc.aio.EOF:
            if msg.HasField("dispatch"):
                await call.write(_result(msg.dispatch.task.id))
                n += 1
        return n


def _measure(name: str, fn: Any, arg: str, tasks: int) -> None:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    n = asyncio.run(fn(arg))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    assert n == tasks, f"{name}: {n} of {tasks} tasks"
    rate, per_task = tasks / wall, cpu / tasks * 1e6
    print(f"{name:<28} {rate:>10.0f} tasks/s  {wall:>6.2f} s wall  {per_task:>7.1f} µs CPU/task")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--inflight", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    port_q = ctx.Queue()
    server = ctx.Process(target=_serve, args=(port_q, args.tasks, args.inflight), daemon=True)
    server.start()
    try:
        port = port_q.get(timeout=30)
        print(f"{args.tasks} tasks, {args.inflight} in flight, grpcio server in a child process")
        for _ in range(args.rounds):
            _measure("conveyor _transport (gRPC)", _ours, f"http://127.0.0.1:{port}", args.tasks)
            _measure("grpcio.aio (baseline)", _grpcio, f"127.0.0.1:{port}", args.tasks)
    finally:
        server.terminate()
        server.join(10)
        port_q.close()


if __name__ == "__main__":
    main()
