"""Reference-server benchmark: batch enqueue, dispatch-to-result through a raw session, unary Enqueue.

Run:  .venv/bin/python bench/server_bench.py [--tasks 20000] [--concurrency 256] [--unary 3000] [--db]

``--db`` runs the same phases a second time on the durable SQLite store (a temporary
file) and prints them next to the in-memory figures, then measures the file size per
100,000 completed tasks with and without retention (:mod:`_store_size`).

It starts ``python -m conveyor_server_min --dev`` on a free port, enqueues
``--tasks`` no-op tasks with EnqueueBatch (1000 per call), drains them with a
minimal raw gRPC session consumer written here (h2 + 5-byte framing; answers
every Dispatch with a SUCCESS Result), then measures unary Enqueue calls/s.
It reports server CPU seconds per 10,000 tasks (from /proc/<pid>/stat) and the
server's peak RSS (VmHWM).

Baseline, measured in the same run: a grpcio (C-core) server in a child
process with a trivial Enqueue handler and a Session handler that pushes
pre-built Dispatches as credit frees up (no engine). It shows what the
transport alone costs on this machine with the same clients.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pyqwest
from connectrpc.protocol import ProtocolType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb  # noqa: E402
from conveyor_sdk._gen.conveyor.v1.service_connect import TaskServiceClient  # noqa: E402
from conveyor_server_min.testing import ServerProcess  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from _store_size import store_sizes  # noqa: E402

SESSION = "/conveyor.v1.WorkerService/Session"
QUEUE = "bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---- process statistics ------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mib(pid: int) -> float:
    """VmHWM (peak resident set) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---- the raw session consumer ------------------------------------------------------------------
class RawConsumer:
    """Minimal gRPC Session worker over h2: Hello, then a SUCCESS Result for every Dispatch."""

    def __init__(
        self, host: str, port: int, concurrency: int, expected: int, queues: dict[str, int] | None = None
    ) -> None:
        self.host, self.port = host, port
        self.queues = queues or {QUEUE: 1}
        self.concurrency = concurrency
        self.expected = expected
        self.done = 0
        self.first_dispatch = 0.0
        self.finished = asyncio.Event()
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self._buf = b""
        self._pending = b""
        self._writer: asyncio.StreamWriter | None = None

    async def run(self) -> float:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self._writer = writer
        conn = self.conn
        conn.initiate_connection()
        conn.increment_flow_control_window(2**30)
        self.sid = conn.get_next_available_stream_id()
        conn.send_headers(
            self.sid,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":authority", f"{self.host}:{self.port}"),
                (":path", SESSION),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        )
        hello = pb.WorkerMessage(
            hello=pb.Hello(queues=self.queues, concurrency=self.concurrency, sdk_version="bench")
        )
        self._send(_frame(hello.SerializeToString()))
        writer.write(conn.data_to_send())
        started = time.perf_counter()
        while not self.finished.is_set():
            data = await reader.read(1 << 18)
            if not data:
                raise ConnectionError("server closed the session early")
            self._on_bytes(data)
            out = conn.data_to_send()
            if out:
                writer.write(out)
        elapsed = time.perf_counter() - (self.first_dispatch or started)
        conn.end_stream(self.sid)
        writer.write(conn.data_to_send())
        writer.close()
        return elapsed

    def _on_bytes(self, data: bytes) -> None:
        results = bytearray()
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                results += self._on_data(event.data)
            elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                raise ConnectionError(f"session ended early: {event}")
        self._send(bytes(results))

    def _send(self, data: bytes) -> None:
        """Queue ``data`` on the session stream and send what flow control allows now."""
        self._pending += data
        conn = self.conn
        while self._pending:
            room = min(conn.local_flow_control_window(self.sid), conn.max_outbound_frame_size)
            if room <= 0:
                return
            chunk, self._pending = self._pending[:room], self._pending[room:]
            conn.send_data(self.sid, chunk)

    def _on_data(self, data: bytes) -> bytes:
        buf = self._buf + data
        out = bytearray()
        offset = 0
        while len(buf) - offset >= 5:
            length = int.from_bytes(buf[offset + 1 : offset + 5], "big")
            end = offset + 5 + length
            if end > len(buf):
                break
            msg = pb.ServerMessage.FromString(buf[offset + 5 : end])
            offset = end
            if msg.HasField("dispatch"):
                if not self.first_dispatch:
                    self.first_dispatch = time.perf_counter()
                result = pb.WorkerMessage(result=pb.Result(task_id=msg.dispatch.task.id, outcome=1))
                out += _frame(result.SerializeToString())
                self.done += 1
                if self.done >= self.expected:
                    self.finished.set()
        self._buf = buf[offset:]
        return bytes(out)


def _frame(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


# ---- phases ------------------------------------------------------------------------------------
def _client(url: str) -> TaskServiceClient:
    transport = pyqwest.HTTPTransport(http_version=pyqwest.HTTPVersion.HTTP2)
    return TaskServiceClient(
        url, protocol=ProtocolType.GRPC, send_compression=None, http_client=pyqwest.Client(transport)
    )


async def batch_enqueue(url: str, total: int) -> float:
    """Seconds to enqueue ``total`` tasks with EnqueueBatch(1000)."""
    client = _client(url)
    batch = pb.EnqueueBatchRequest(
        tasks=[pb.EnqueueRequest(queue=QUEUE, type="noop", payload=b"{}") for _ in range(1000)]
    )
    started = time.perf_counter()
    for _ in range(total // 1000):
        resp = await client.enqueue_batch(batch)
        errors = [r.error for r in resp.results if r.error]
        if errors:
            raise RuntimeError(f"batch item failed: {errors[0]}")
    return time.perf_counter() - started


async def unary_enqueue(url: str, total: int, parallel: int = 32) -> tuple[float, list[float]]:
    """Seconds for ``total`` unary Enqueue calls, ``parallel`` in flight, and each call's latency."""
    client = _client(url)
    req = pb.EnqueueRequest(queue="unary", type="noop", payload=b"{}")
    latencies: list[float] = []

    async def lane(n: int) -> None:
        for _ in range(n):
            t0 = time.perf_counter()
            await client.enqueue(req)
            latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    await asyncio.gather(*(lane(total // parallel) for _ in range(parallel)))
    return time.perf_counter() - started, latencies


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("nan")


@dataclass
class Figures:
    batch_items_s: float = 0.0
    tasks_s: float = 0.0
    cpu_per_10k: float = 0.0
    rss_mib: float = 0.0
    unary_s: float = 0.0
    unary_p99_ms: float = 0.0
    unary_cpu_ms: float = 0.0


def measure(url: str, pid: int, args: argparse.Namespace, *, enqueue: bool = True) -> Figures:
    """Run the phases against one server."""
    fig = Figures()
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    if enqueue:
        fig.batch_items_s = args.tasks / asyncio.run(batch_enqueue(url, args.tasks))
    cpu0 = cpu_seconds(pid)
    consumer = RawConsumer(host, int(port), args.concurrency, args.tasks)
    fig.tasks_s = args.tasks / asyncio.run(consumer.run())
    fig.cpu_per_10k = (cpu_seconds(pid) - cpu0) * 10_000 / args.tasks
    cpu1 = cpu_seconds(pid)
    elapsed, latencies = asyncio.run(unary_enqueue(url, args.unary))
    fig.unary_s = (args.unary // 32 * 32) / elapsed
    fig.unary_p99_ms = p99(latencies) * 1000
    fig.unary_cpu_ms = (cpu_seconds(pid) - cpu1) * 1000 / (args.unary // 32 * 32)
    fig.rss_mib = peak_rss_mib(pid)
    return fig


# ---- grpcio baseline server ----------------------------------------------------------------------
def baseline_server(tasks: int) -> None:
    """Child-process mode: a grpcio server with no engine (prints its port)."""
    import grpc

    envelope = pb.ServerMessage(dispatch=pb.Dispatch())
    envelope.dispatch.task.queue = QUEUE
    envelope.dispatch.task.type = "noop"
    envelope.dispatch.task.payload = b"{}"

    async def enqueue(req: pb.EnqueueRequest, ctx: object) -> pb.EnqueueResponse:
        return pb.EnqueueResponse(task=pb.TaskInfo(id="x", queue=req.queue, type=req.type))

    async def session(requests: object, ctx: object) -> object:
        it = aiter(requests)  # type: ignore[call-overload]
        hello = await anext(it)
        credit = hello.hello.concurrency
        yield pb.ServerMessage(welcome=pb.Welcome(session_id="s"))
        sent = 0
        while sent < tasks:
            while credit and sent < tasks:
                msg = pb.ServerMessage()
                msg.CopyFrom(envelope)
                msg.dispatch.task.id = f"t{sent}"
                yield msg
                sent += 1
                credit -= 1
            await anext(it)
            credit += 1
        async for _ in it:
            pass

    async def main() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "conveyor.v1.TaskService",
                    {
                        "Enqueue": grpc.unary_unary_rpc_method_handler(
                            enqueue, pb.EnqueueRequest.FromString, pb.EnqueueResponse.SerializeToString
                        )
                    },
                ),
                grpc.method_handlers_generic_handler(
                    "conveyor.v1.WorkerService",
                    {
                        "Session": grpc.stream_stream_rpc_method_handler(
                            session, pb.WorkerMessage.FromString, pb.ServerMessage.SerializeToString
                        )
                    },
                ),
            )
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


def run_baseline(args: argparse.Namespace) -> Figures | None:
    try:
        import grpc  # noqa: F401
    except ImportError:
        return None
    child = subprocess.Popen(
        [sys.executable, __file__, "--baseline-server", "--tasks", str(args.tasks)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        return measure(f"http://127.0.0.1:{port}", child.pid, args, enqueue=False)
    finally:
        child.terminate()
        child.wait(10)
        if child.stdout is not None:
            child.stdout.close()


# ---- main --------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--unary", type=int, default=3_000)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument(
        "--db", action="store_true", help="also run on the durable SQLite store (a temp file) and size it"
    )
    parser.add_argument("--size-tasks", type=int, default=100_000, help="tasks for the --db file-size phase")
    parser.add_argument("--baseline-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_server:
        baseline_server(args.tasks)
        return
    ours = run_server(["--dev"], args)
    durable = sizes = None
    if args.db:
        with tempfile.TemporaryDirectory(prefix="conveyor-bench-") as folder:
            durable = run_server(["--dev", "--db", str(Path(folder) / "bench.db")], args)
            sizes = store_sizes(args.size_tasks, folder, RawConsumer, _client, QUEUE)
    base = None if args.no_baseline else run_baseline(args)
    report(ours, base, args, 0, durable)
    if sizes is not None:
        print(f"SQLite file size per 100,000 completed tasks (measured with {args.size_tasks:,}, scaled):")
        for label, size in sizes:
            print(f"  {label:58} {size / 2**20:8.1f} MiB")
        print("  (without retention the size is bounded by backlog + one reap interval, not by the count)")


def run_server(flags: list[str], args: argparse.Namespace) -> Figures:
    """Measure one server; exits when it does not stop cleanly."""
    server = ServerProcess(flags)
    server.start()
    try:
        assert server.proc is not None
        figures = measure(server.url, server.proc.pid, args)
    finally:
        code = server.stop()
        if server.proc is not None and server.proc.stdout is not None:
            server.proc.stdout.close()
    if code:
        raise SystemExit(f"server {flags} exited with {code}")
    return figures


def report(
    ours: Figures, base: Figures | None, args: argparse.Namespace, code: int, durable: Figures | None = None
) -> None:
    def col(value: float | None, fmt: str) -> str:
        return format(value, fmt) if value is not None else "n/a"

    rows = [
        ("batch enqueue (items/s)", "batch_items_s", ">= 20,000", ",.0f"),
        ("dispatch-to-result (tasks/s)", "tasks_s", ">= 5,000", ",.0f"),
        ("server CPU s / 10k tasks", "cpu_per_10k", "", ".2f"),
        ("unary Enqueue (calls/s)", "unary_s", "", ",.0f"),
        ("unary Enqueue p99 (ms)", "unary_p99_ms", "", ".2f"),
        ("server CPU ms / unary call", "unary_cpu_ms", "", ".3f"),
        ("server peak RSS (MiB)", "rss_mib", "", ".1f"),
    ]
    print(f"tasks={args.tasks} concurrency={args.concurrency} unary={args.unary} cores={os.cpu_count()}")
    extra = f" {'sqlite --db':>14}" if durable else ""
    print(f"{'metric':32} {'conveyor_server_min':>20}{extra} {'grpcio baseline':>16} {'target':>10}")
    for name, attr, target, fmt in rows:
        value, baseline = getattr(ours, attr), base and getattr(base, attr)
        if attr == "batch_items_s":
            baseline = None  # the baseline has no engine to enqueue into
        durable_col = f" {col(getattr(durable, attr), fmt):>14}" if durable else ""
        print(f"{name:32} {col(value, fmt):>20}{durable_col} {col(baseline, fmt):>16} {target:>10}")
    if durable:
        print("sqlite --db = the same server on the durable store (commit before every acknowledgement)")
    print("baseline = grpcio C-core server, no engine (transport cost only); same clients")
    print(f"server exit code: {code}")


if __name__ == "__main__":
    main()
