"""Producer-client benchmark: unary Enqueue calls/s and EnqueueBatch items/s, ours vs a grpcio baseline.

Run:  .venv/bin/python bench/client_bench.py [--calls 2000] [--concurrency 32] [--batches 10] [--rounds 2]

Starts ``python -m conveyor_server_min --dev`` on a free port and, in the same
run and against the same server, measures:

* ``Client`` (async, Connect + proto over h2c, validation + codec included),
  ``Client(protocol="grpc")``, ``Client(wire_format="json")``, and ``SyncClient`` (sequential only);
* the candidates for the async Client's task calls (see ``_client``): its one path (``UnaryStub``)
  on our HTTP/2 transport or on pyqwest's (``pyqwest``), and connectrpc's generated client on either
  (``connectrpc``, ``connectrpc-pyqwest``: the two other paths task calls took before ``_client/unary.py``);
* the baseline: ``grpc.aio`` with hand-written ``channel.unary_unary`` stubs and
  the same pre-encoded payload (no validation, no codec).

Figures: sequential calls/s, concurrent calls/s (``--concurrency`` in flight),
EnqueueBatch items/s (1000 items per call), and client CPU microseconds per
call (this process only; the server runs in its own process). The best of
``--rounds`` rounds is printed.

Idle round trip (``--idle`` calls per client, 0 to skip): one Enqueue every ``--gap-ms`` ms, so
each call starts on an idle, cold process as a producer's sporadic enqueue does; the two Connect
paths take turns call by call, and p50/p90 of each are printed with their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pyqwest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_sdk._client.h2transport import H2Transport  # noqa: E402
from conveyor_sdk._gen.conveyor.v1 import service_connect as sc  # noqa: E402
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb  # noqa: E402
from conveyor_sdk.client import Client, SyncClient, task  # noqa: E402
from conveyor_server_min.testing import ServerProcess  # noqa: E402

PAYLOAD = {"user_id": 42, "email": "someone@example.com"}
VARIANTS = ("connect", "connectrpc", "pyqwest", "connectrpc-pyqwest", "grpc", "json")
BATCH = 1000


@dataclass
class Figure:
    name: str
    ops: int
    wall: float
    cpu: float

    def line(self, unit: str) -> str:
        rate = self.ops / self.wall if self.wall else 0.0
        return f"  {self.name:<34} {rate:>10,.0f} {unit}/s   {self.cpu / self.ops * 1e6:>8.1f} us CPU/{unit}"


async def timed(name: str, ops: int, body: Callable[[], Awaitable[None]]) -> Figure:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    await body()
    return Figure(name, ops, time.perf_counter() - wall0, time.process_time() - cpu0)


async def concurrently(n: int, width: int, call: Callable[[int], Awaitable[object]]) -> None:
    next_index = iter(range(n))

    async def lane() -> None:
        for i in next_index:
            await call(i)

    await asyncio.gather(*(lane() for _ in range(width)))


def baseline_stubs(channel: grpc.aio.Channel) -> tuple[Callable[..., Awaitable[pb.EnqueueResponse]], ...]:
    enqueue = channel.unary_unary(
        "/conveyor.v1.TaskService/Enqueue",
        request_serializer=pb.EnqueueRequest.SerializeToString,
        response_deserializer=pb.EnqueueResponse.FromString,
    )
    batch = channel.unary_unary(
        "/conveyor.v1.TaskService/EnqueueBatch",
        request_serializer=pb.EnqueueBatchRequest.SerializeToString,
        response_deserializer=pb.EnqueueBatchResponse.FromString,
    )
    return enqueue, batch


def _client(url: str, variant: str) -> Client:
    """The Client for one row: ``connect``, ``grpc``, ``json`` on the one task-call path (UnaryStub on
    our HTTP/2 transport); ``pyqwest``: that stub over pyqwest's HTTP/2 transport (the path of
    ``http2=False`` and ``transport=``); ``connectrpc`` / ``connectrpc-pyqwest``: connectrpc's generated
    client on our HTTP/2 transport / on pyqwest's, the two task-call paths the Client had before."""
    h2 = pyqwest.HTTPVersion.HTTP2
    if variant == "pyqwest":
        return Client(url, transport=pyqwest.HTTPTransport(http_version=h2))
    if variant == "json":
        return Client(url, wire_format="json")
    if variant in ("connect", "grpc"):
        return Client(url, protocol=variant)  # type: ignore[arg-type]
    client = Client(url)
    transport = H2Transport(url) if variant == "connectrpc" else pyqwest.HTTPTransport(http_version=h2)
    http = pyqwest.Client(transport)
    client._tasks = sc.TaskServiceClient(url, http_client=http, **client._config.connect_kwargs())
    return client


async def bench_ours(url: str, args: argparse.Namespace, protocol: str) -> list[Figure]:
    label = f"Client ({protocol})"
    async with _client(url, protocol) as client:
        await client.enqueue("warmup", PAYLOAD)

        async def seq() -> None:
            for _ in range(args.calls):
                await client.enqueue("bench", PAYLOAD, queue="bench")

        async def conc() -> None:
            await concurrently(
                args.calls, args.concurrency, lambda i: client.enqueue("bench", PAYLOAD, queue="bench")
            )

        items = [task("bench", PAYLOAD, queue="bench") for _ in range(BATCH)]

        async def batches() -> None:
            for _ in range(args.batches):
                await client.enqueue_batch(items)

        return [
            await timed(f"{label} sequential", args.calls, seq),
            await timed(f"{label} x{args.concurrency}", args.calls, conc),
            await timed(f"{label} EnqueueBatch", args.batches * BATCH, batches),
        ]


async def bench_baseline(url: str, args: argparse.Namespace) -> list[Figure]:
    target = url.removeprefix("http://")
    data = b'{"email":"someone@example.com","user_id":42}'
    req = pb.EnqueueRequest(type="bench", queue="bench", payload=data, content_type="application/json")
    async with grpc.aio.insecure_channel(target) as channel:
        enqueue, batch = baseline_stubs(channel)
        await enqueue(req)

        async def seq() -> None:
            for _ in range(args.calls):
                await enqueue(req)

        async def conc() -> None:
            await concurrently(args.calls, args.concurrency, lambda i: enqueue(req))

        breq = pb.EnqueueBatchRequest(tasks=[req] * BATCH)

        async def batches() -> None:
            for _ in range(args.batches):
                await batch(breq)

        def build_item() -> pb.EnqueueRequest:
            payload = json.dumps(PAYLOAD, separators=(",", ":")).encode()
            return pb.EnqueueRequest(
                type="bench", queue="bench", payload=payload, content_type="application/json"
            )

        async def batches_built() -> None:
            # the same work our client does per call: encode every payload and build every item
            for _ in range(args.batches):
                await batch(pb.EnqueueBatchRequest(tasks=[build_item() for _ in range(BATCH)]))

        return [
            await timed("grpc.aio baseline sequential", args.calls, seq),
            await timed(f"grpc.aio baseline x{args.concurrency}", args.calls, conc),
            await timed("grpc.aio EnqueueBatch (request pre-built)", args.batches * BATCH, batches),
            await timed("grpc.aio EnqueueBatch (built per call)", args.batches * BATCH, batches_built),
        ]


def bench_sync(url: str, args: argparse.Namespace) -> Figure:
    with SyncClient(url) as client:
        client.enqueue("warmup", PAYLOAD)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(args.calls):
            client.enqueue("bench", PAYLOAD, queue="bench")
        return Figure(
            "SyncClient sequential", args.calls, time.perf_counter() - wall0, time.process_time() - cpu0
        )


async def idle_round_trips(url: str, calls: int, gap: float) -> dict[str, list[float]]:
    """Round-trip ms of enqueues on idle clients, the two Connect paths taking turns."""
    out: dict[str, list[float]] = {"connect": [], "connectrpc": []}
    async with _client(url, "connect") as ours, _client(url, "connectrpc") as theirs:
        pair = {"connect": ours, "connectrpc": theirs}
        for client in pair.values():
            await client.enqueue("warmup", PAYLOAD, queue="idle")
        for i in range(calls * 2):
            name = ("connect", "connectrpc")[i % 2]
            await asyncio.sleep(gap)
            t0 = time.perf_counter()
            await pair[name].enqueue("idle", PAYLOAD, queue="idle")
            out[name].append((time.perf_counter() - t0) * 1000)
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def best(rounds: list[list[Figure]]) -> list[Figure]:
    return [min(group, key=lambda f: f.wall) for group in zip(*rounds, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--idle", type=int, default=150, help="idle round trips per Connect path (0: skip)")
    parser.add_argument("--gap-ms", type=float, default=20.0)
    args = parser.parse_args()
    idle: dict[str, list[float]] = {}
    with ServerProcess(["--dev"]) as server:
        results: dict[str, list[list[Figure]]] = {key: [] for key in (*VARIANTS, "baseline", "sync")}
        if args.idle:
            idle = asyncio.run(idle_round_trips(server.url, args.idle, args.gap_ms / 1000))
        for _ in range(args.rounds):
            for variant in VARIANTS:
                results[variant].append(asyncio.run(bench_ours(server.url, args, variant)))
            results["baseline"].append(asyncio.run(bench_baseline(server.url, args)))
            results["sync"].append([bench_sync(server.url, args)])
        code = server.stop()
    print(
        f"client benchmark: {args.calls} unary calls, {args.batches}x{BATCH} batch items,"
        f" best of {args.rounds}"
    )
    for key in (*VARIANTS, "sync", "baseline"):
        figures = best(results[key])
        for fig in figures:
            print(fig.line("item" if "Batch" in fig.name else "call"))
    if idle:
        print(f"idle round trip, one enqueue every {args.gap_ms:g} ms, {args.idle} calls per path (ms):")
        for name, values in idle.items():
            print(f"  Client ({name:<10})  p50 {_pct(values, 0.5):.3f}  p90 {_pct(values, 0.9):.3f}")
        ratio = _pct(idle["connect"], 0.5) / _pct(idle["connectrpc"], 0.5)
        print(f"  connect / connectrpc p50: {ratio:.2f}")
    print(f"server exit code: {code}")


if __name__ == "__main__":
    main()
