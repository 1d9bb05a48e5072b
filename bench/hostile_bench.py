"""Hostile-client harness: one attack at a time against the reference server, loopback only.

Run:  .venv/bin/python bench/hostile_bench.py [--seconds 3] [--settle 5] [--only NAME ...]

It starts ``python -m conveyor_server_min --token s3cret`` on a free port (default limits) and a
well-behaved client in a child process (its own source address, 127.0.0.2, so per-client caps on
the attacker do not apply to it) that makes one gRPC GetTask call every 10 ms on one HTTP/2
connection. Each attack runs for at most ``--seconds`` (and a bounded number of connections and
bytes) from 127.0.0.1, at a lower CPU priority (nice 10) than the server and the good client, as
if it came from another machine; then every attack socket is closed and the attack starts over
with new connections until its time is up. For each attack it prints the server's
RSS before, at its peak during the attack and ``--settle`` seconds after, and the good client's
p50/p99/max latency and failed calls during the attack.

Targets: RSS back within 10% of its starting value after the attack connection is closed; the good
client's p99 under 100 ms during any single-connection attack. Set PYTHONPATH to another checkout
to measure an older server with the same attacks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import h2.config
import h2.connection
import h2.events

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb  # noqa: E402
from conveyor_server_min.testing import ServerProcess  # noqa: E402

TOKEN = "s3cret"
GET_TASK = "/conveyor.v1.TaskService/GetTask"
SESSION = "/conveyor.v1.WorkerService/Session"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
PING = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + b"pingping"


def rss_mib(pid: int) -> float:
    """Current resident set size (VmRSS) of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _headers(host: str, path: str, *, auth: bool = True) -> list[tuple[str, str]]:
    headers = [(":method", "POST"), (":scheme", "http"), (":authority", host), (":path", path)]
    headers += [("content-type", "application/grpc"), ("te", "trailers")]
    return headers + ([("authorization", f"Bearer {TOKEN}")] if auth else [])


# ---- the well-behaved client (child process) ---------------------------------------------------
def good_client(host: str, port: int, interval: float) -> None:
    """One GetTask per ``interval`` on one connection; prints ``<unix time> <latency ms> <ok>`` lines."""
    sock = socket.create_connection((host, port), source_address=("127.0.0.2", 0))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    body = pb.GetTaskRequest(id="no-such-task").SerializeToString()
    framed = b"\x00" + len(body).to_bytes(4, "big") + body
    while True:
        started = time.time()
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, _headers(f"{host}:{port}", GET_TASK))
        conn.send_data(sid, framed, end_stream=True)
        sock.sendall(conn.data_to_send())
        status = ""
        while not status:
            data = sock.recv(65536)
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.TrailersReceived | h2.events.ResponseReceived):
                    status = dict(event.headers).get("grpc-status", status)  # type: ignore[arg-type]
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == sid:
                    status = "reset"
            sock.sendall(conn.data_to_send())
        took = (time.time() - started) * 1000
        print(f"{started:.6f} {took:.3f} {int(status == '5')}", flush=True)
        time.sleep(max(0.0, interval - took / 1000))


class GoodClient:
    """Runs :func:`good_client` in a child process and collects its samples."""

    def __init__(self, host: str, port: int) -> None:
        cmd = [sys.executable, __file__, "--good-client", f"{host}:{port}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.samples: list[tuple[float, float, int]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            when, took, ok = line.split()
            self.samples.append((float(when), float(took), int(ok)))

    def window(self, start: float, end: float) -> list[tuple[float, int]]:
        return [(took, ok) for when, took, ok in list(self.samples) if start <= when <= end]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._thread.join(5)


# ---- attacks (each returns a short note) -------------------------------------------------------
async def _connect(port: int, *, h2c: bool = True) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if h2c:
        writer.write(PREFACE + SETTINGS)
    return reader, writer


async def _until_closed(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):
            pass


def _close_all(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        writer.transport.abort()


async def rapid_reset(port: int, seconds: float) -> str:
    """One connection at a time: HEADERS + RST_STREAM pairs as fast as possible (reconnects when closed)."""
    block = h2.connection.H2Connection().encoder.encode(_headers("x", SESSION))
    deadline, sent, conns, sid = time.monotonic() + seconds, 0, 0, 1
    while time.monotonic() < deadline:
        reader, writer = await _connect(port)
        conns, sid = conns + 1, 1
        closed = asyncio.ensure_future(_until_closed(reader))
        while not closed.done() and time.monotonic() < deadline:
            batch = bytearray()
            for _ in range(100):
                batch += _frame(0x1, 0x4, sid, block) + _frame(0x3, 0, sid, (8).to_bytes(4, "big"))
                sid += 2
            writer.write(batch)
            sent += 100
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            await asyncio.sleep(0)  # let the reader notice a close
        _close_all([writer])
        closed.cancel()
    return f"{sent} streams reset over {conns} connection(s)"


def _frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + sid.to_bytes(4, "big") + payload


async def _flood(port: int, seconds: float, opening: bytes, unit: bytes, name: str) -> str:
    """One connection: ``opening`` then ``unit`` repeated until closed, time is up, or writes block."""
    reader, writer = await _connect(port)
    closed = asyncio.ensure_future(_until_closed(reader))
    writer.write(opening)
    deadline, sent, burst = time.monotonic() + seconds, 0, unit * max(1, 65536 // len(unit))
    while not closed.done() and time.monotonic() < deadline:
        writer.write(burst)
        sent += len(burst)
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(max(0.01, deadline - time.monotonic())):
                await writer.drain()
        await asyncio.sleep(0)  # let the reader notice a close
    state = "closed by server" if closed.done() else "still open"
    _close_all([writer])
    closed.cancel()
    return f"{sent / 2**20:.1f} MiB of {name} sent; {state}"


async def ping_flood(port: int, seconds: float) -> str:
    """One connection sends PINGs and never reads the ACKs."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    writer.write(PREFACE + SETTINGS)
    deadline, sent, burst = time.monotonic() + seconds, 0, PING * 4096
    while time.monotonic() < deadline and not writer.transport.is_closing() and not reader.at_eof():
        writer.write(burst)
        sent += len(burst)
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(max(0.01, deadline - time.monotonic())):
                await writer.drain()
        await asyncio.sleep(0)
    state = "closed by server" if reader.at_eof() or writer.transport.is_closing() else "still open"
    _close_all([writer])
    return f"{sent // len(PING):,} pings sent without reading; {state}"


async def empty_data(port: int, seconds: float) -> str:
    headers_frame = _headers_frame(1, end_headers=True)
    empty = b"\x00\x00\x00\x00\x00\x00\x00\x00\x01"  # DATA, no flags, stream 1, no payload
    return await _flood(port, seconds, headers_frame, empty, "empty DATA frames")


async def continuation(port: int, seconds: float) -> str:
    fragment = b"\x00" * 16_000
    cont = _frame(0x9, 0, 1, fragment)
    return await _flood(port, seconds, _headers_frame(1, end_headers=False), cont, "CONTINUATION frames")


def _headers_frame(sid: int, *, end_headers: bool) -> bytes:
    block = h2.connection.H2Connection().encoder.encode(_headers("x", SESSION))
    return _frame(0x1, 0x4 if end_headers else 0, sid, block)


async def big_frames(port: int, seconds: float) -> str:
    """20 connections each announce a 16 MiB frame and start sending it (1 MiB each at most)."""
    header = ((1 << 24) - 1).to_bytes(3, "big") + b"\x00\x00\x00\x00\x00\x01"
    return await _many(port, seconds, 20, PREFACE + SETTINGS + header, b"x" * 65536, 16, h2c=False)


async def h1_unauth_bodies(port: int, seconds: float) -> str:
    """40 HTTP/1.1 POSTs of 5 MiB with no token."""
    head = (
        f"POST {GET_TASK} HTTP/1.1\r\nhost: x\r\ncontent-type: application/proto\r\n"
        f"content-length: {5 << 20}\r\n\r\n"
    ).encode()
    return await _many(port, seconds, 40, head, b"x" * 65536, 80, h2c=False)


async def _many(  # noqa: PLR0917  # internal helper; each call site names what it sends
    port: int, seconds: float, count: int, opening: bytes, chunk: bytes, chunks: int, *, h2c: bool
) -> str:
    deadline = time.monotonic() + seconds
    conns = [await _connect(port, h2c=h2c) for _ in range(count)]

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        closed = asyncio.ensure_future(_until_closed(reader))
        writer.write(opening)
        for _ in range(chunks):
            if closed.done() or time.monotonic() > deadline:
                break
            writer.write(chunk)
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(max(0.01, deadline - time.monotonic())):
                    await writer.drain()
            await asyncio.sleep(0)  # let the reader notice a close
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(closed), max(0.01, deadline - time.monotonic()))
        return closed.done()

    done = await asyncio.gather(*(one(r, w) for r, w in conns))
    _close_all([w for _, w in conns])
    return f"{sum(done)}/{count} connections closed by the server within {seconds:g}s"


async def idle_connections(port: int, seconds: float) -> str:
    """500 connections that send the HTTP/2 preface and nothing else, held for the whole attack."""
    return await _hold(port, seconds, 500, PREFACE + SETTINGS)


async def slowloris(port: int, seconds: float) -> str:
    """100 HTTP/1.1 connections with half a request line."""
    return await _hold(port, seconds, 100, b"POST /conveyor.v1.TaskSer")


async def stalled_streams(port: int, seconds: float) -> str:
    """One connection opens 100 authorised unary streams and never sends their bodies."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    for _ in range(100):
        conn.send_headers(conn.get_next_available_stream_id(), _headers("x", GET_TASK))
    return await _hold(port, seconds, 1, conn.data_to_send(), h2c=False)


async def _hold(port: int, seconds: float, count: int, opening: bytes, *, h2c: bool = False) -> str:
    writers, closers = [], []
    for _ in range(count):
        try:
            reader, writer = await _connect(port, h2c=h2c)
        except OSError:
            break
        writer.write(opening)
        writers.append(writer)
        closers.append(asyncio.ensure_future(_until_closed(reader)))
    await asyncio.sleep(seconds)  # the attack is holding connections open; nothing to wait for
    closed = sum(c.done() for c in closers)
    _close_all(writers)
    for c in closers:
        c.cancel()
    return f"{closed}/{len(writers)} connections closed by the server within {seconds:g}s"


async def random_bytes(port: int, seconds: float) -> str:
    """200 connections send 200 random bytes each; how many get an answer or a close in time."""
    rng = random.Random(12)

    async def one() -> bool:
        reader, writer = await _connect(port, h2c=False)
        writer.write(rng.randbytes(200))
        try:
            async with asyncio.timeout(seconds):
                await _until_closed(reader)
        except TimeoutError:
            return False
        finally:
            writer.transport.abort()
        return True

    done = await asyncio.gather(*(one() for _ in range(200)))
    return f"{sum(done)}/200 answered or closed within {seconds:g}s"


ATTACKS: dict[str, Callable[[int, float], Awaitable[str]]] = {
    "rapid_reset": rapid_reset,
    "big_frames": big_frames,
    "h1_unauth_bodies": h1_unauth_bodies,
    "idle_connections": idle_connections,
    "slowloris": slowloris,
    "stalled_streams": stalled_streams,
    "ping_flood": ping_flood,
    "empty_data": empty_data,
    "continuation": continuation,
    "random_bytes": random_bytes,
}


# ---- driver ------------------------------------------------------------------------------------
async def _repeat(attack: Callable[[int, float], Awaitable[str]], port: int, seconds: float) -> str:
    """Run ``attack`` again (a fresh round, new connections) until ``seconds`` are used up."""
    deadline = time.monotonic() + seconds
    notes: list[str] = []
    while (left := deadline - time.monotonic()) > 0.05:
        notes.append(await attack(port, left))
    return f"{notes[0]} (+{len(notes) - 1} more rounds)" if len(notes) > 1 else notes[0]


def run_attack(name: str, pid: int, port: int, good: GoodClient, args: argparse.Namespace) -> list[str]:
    before = rss_mib(pid)
    peak = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            peak.append(rss_mib(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start, cpu0 = time.time(), cpu_seconds(pid)
    note = asyncio.run(_repeat(ATTACKS[name], port, args.seconds))
    end, cpu = time.time(), cpu_seconds(pid) - cpu0
    stop.set()
    sampler.join()
    time.sleep(args.settle)  # let the server settle; RSS is read once afterwards
    after = rss_mib(pid)
    calls = good.window(start, end)
    lat = sorted(took for took, _ in calls) or [float("nan")]
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    failed = sum(1 for _, ok in calls if not ok)
    return [
        name,
        f"{before:.1f}",
        f"{max(peak):.1f}",
        f"{after:.1f}",
        f"{(after - before) / before * 100:+.1f}%",
        f"{statistics.median(lat):.1f}",
        f"{p99:.1f}",
        f"{lat[-1]:.1f}",
        f"{len(calls)}/{failed}",
        f"{cpu:.2f}",
        note,
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each attack")
    parser.add_argument("--settle", type=float, default=5.0, help="wait before the 'after' RSS")
    parser.add_argument("--only", nargs="*", choices=sorted(ATTACKS), help="run only these attacks")
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra server flag, e.g. --server-arg=--header-timeout=2s",
    )
    parser.add_argument("--good-client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.good_client:
        host, port = args.good_client.rsplit(":", 1)
        with contextlib.suppress(KeyboardInterrupt, BrokenPipeError, ConnectionError):
            good_client(host, int(port), 0.01)
        return 0
    server = ServerProcess(["--token", TOKEN, *args.server_arg])
    server.start()
    assert server.proc is not None
    host, port = server.address.rsplit(":", 1)
    good = GoodClient(host, int(port))
    os.nice(10)  # the attacks run here: in real life they come from another machine, so give way
    rows = [["attack", "RSS0", "peak", "after", "Δ", "p50ms", "p99ms", "max", "calls/fail", "srvCPU", "note"]]
    try:
        time.sleep(1.0)  # warm-up: the good client's first calls
        for name in args.only or ATTACKS:
            rows.append(run_attack(name, server.proc.pid, int(port), good, args))
            print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    finally:
        good.stop()
        code = server.stop()
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1])
    print(f"server exit code {code}; python {sys.version.split()[0]}; cores {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
