"""The reference server's Python CPU per unary Enqueue, in one process: no sockets, no event-loop turns.

    PYTHONPATH=CHECKOUT .venv/bin/python bench/unary_inproc.py [--calls 20000] [--profile]
    PYTHONPATH=CHECKOUT .venv/bin/python bench/unary_inproc.py --cold 6 [--upto build] [--calls 5000]

A real ``H2Connection`` with the real router, services and in-memory engine reads pre-built
requests (HEADERS + DATA with END_STREAM, one read each, as the SDK's producer sends them) and
answers into a transport that only counts bytes. Printed: ``time.process_time`` per call, after 500
warm-up calls. What it leaves out (the socket reads and writes, epoll, uvloop) is the same for
every checkout, so the figure moves only with the server's Python, and much less with the machine's
load than ``bench/unary_ab.py``. ``--profile``: cProfile on a CPU clock, the top functions by own time.

``--cold MB``: before each call, copy MB megabytes (evicting the CPU caches, as the kernel, the
client and the idle time between calls do to a real server), and print the median of each call's
thread CPU time instead. Over loopback the server's Python costs about what it costs here with 4
to 8 MB, about twice the hot figure: what a call touches matters more than how many steps it takes.
``--upto STAGE`` (this tree's layout only) stops each call early with a canned reply, to see what
the layers cost cold: ``kernel`` (the kernel takes the request and answers it, nothing else),
``router`` (the HTTP layer calls a handler that returns a canned reply), ``build`` (the handler
also validates and builds the task), ``engine`` (it also commits it, replying canned).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import time
from typing import Any

import h2.config
import h2.connection

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_server_min._http.auth import Authenticator
from conveyor_server_min._http.h2conn import H2Connection
from conveyor_server_min._http.rpc import Router
from conveyor_server_min.config import ServerConfig
from conveyor_server_min.server import load_services

WARM = 500
HEADERS = [(":method", "POST"), (":scheme", "http"), (":path", "/conveyor.v1.TaskService/Enqueue"),
           (":authority", "127.0.0.1"), ("content-type", "application/proto"),
           ("connect-protocol-version", "1"), ("connect-timeout-ms", "10000")]  # fmt: skip


class _Transport:
    def __init__(self) -> None:
        self.kept = bytearray()
        self.keeping = True

    def write(self, data: bytes) -> None:
        if self.keeping:
            self.kept += data

    def get_write_buffer_size(self) -> int:
        return 0

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def _requests(client: h2.connection.H2Connection, count: int) -> list[bytes]:
    out = []
    for i in range(count):
        # As the SDK's ``client.enqueue("noop", b"", queue="ab")`` sends it: its own id, a content type.
        request = pb.EnqueueRequest(
            task_id=f"{i:026d}", type="noop", queue="ab", content_type="application/octet-stream"
        )
        body = request.SerializeToString()
        sid = client.get_next_available_stream_id()
        client.send_headers(sid, HEADERS)
        client.outbound_flow_control_window = 1 << 30  # the harness never reads the server's acks
        client.send_data(sid, body, end_stream=True)
        if i % 100 == 99:
            client.increment_flow_control_window(1 << 20)  # reopens the server's sending window
        out.append(client.data_to_send())
        del client.streams[sid]  # nor the answers
    return out


_STAGES = ("kernel", "router", "build", "engine")


def _stop_early(stage: str) -> None:
    """Patch this tree's server so that each call ends at ``stage`` with a canned reply."""
    from conveyor_sdk._h2kernel.server_conn import send_unary
    from conveyor_server_min._services.tasks import TaskService

    canned = pb.EnqueueResponse(task=pb.TaskInfo(id="0" * 26, queue="ab", type="noop"))
    if stage == "kernel":
        body = canned.SerializeToString()

        def serve_taken(self: H2Connection, sid: int, raw: Any, _body: bytes) -> None:
            assert send_unary(self.h2, sid, "application/proto", body)

        H2Connection._serve_taken = serve_taken  # type: ignore[method-assign]
        return

    def enqueue(self: TaskService, req: pb.EnqueueRequest, ctx: Any) -> pb.EnqueueResponse:
        if stage != "router":
            task = self._build(req)
            if stage == "engine":
                self.engine.enqueue(task)
        return canned

    TaskService.enqueue = enqueue  # type: ignore[method-assign, assignment]


def _cold_calls(conn: H2Connection, requests: list[bytes], megabytes: float) -> list[int]:
    size = int(megabytes * (1 << 20))
    source, sink = bytearray(b"x" * size), bytearray(size)
    clock = time.thread_time_ns
    spent = []
    for data in requests:
        sink[:] = source
        start = clock()
        conn.data_received(data)
        spent.append(clock() - start)
    return spent


async def _main(calls: int, profile: bool, cold: float | None = None) -> None:
    config = ServerConfig()
    services = load_services(config.engine)
    await services.start()
    try:
        router = Router(services, Authenticator(()), max_message=config.max_message_bytes)
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        transport = _Transport()
        conn = H2Connection(transport, router, "peer")  # type: ignore[arg-type]
        conn.start(client.data_to_send())
        client.receive_data(bytes(transport.kept))  # our SETTINGS
        transport.keeping = False
        conn.data_received(client.data_to_send())  # the client's SETTINGS ACK
        requests = _requests(client, WARM + calls)
        for data in requests[:WARM]:
            conn.data_received(data)
        if cold is not None:
            spent_ns = _cold_calls(conn, requests[WARM:], cold)
            assert not conn.streams, "requests left unanswered"
            print(f"{statistics.median(spent_ns) / 1000:.1f} us CPU per call, median, caches evicted "
                  f"({cold:g} MB) before each of {calls} calls")  # fmt: skip
            return
        prof = cProfile.Profile(time.process_time) if profile else None
        start = time.process_time()
        if prof is not None:
            prof.enable()
        for data in requests[WARM:]:
            conn.data_received(data)
        if prof is not None:
            prof.disable()
        spent = time.process_time() - start
        assert not conn.streams, "requests left unanswered"
        print(f"{spent / calls * 1e6:.1f} us CPU per call ({calls} calls)")
        if prof is not None:
            stats = pstats.Stats(prof)
            print(f"{stats.total_calls / calls:.0f} Python calls per Enqueue")  # type: ignore[attr-defined]
            stats.sort_stats("tottime").print_stats(25)
    finally:
        await services.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--cold", type=float, metavar="MB", help="evict the caches before each call")
    parser.add_argument("--upto", choices=_STAGES, help="end each call at this stage (this tree only)")
    opts = parser.parse_args()
    if opts.upto:
        _stop_early(opts.upto)
    asyncio.run(_main(opts.calls, opts.profile, opts.cold))


if __name__ == "__main__":
    main()
