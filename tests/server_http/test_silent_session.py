"""Over a real server process and real sockets: a worker that goes quiet, and PINGs.

The rules are in docs/server-engine.md ("Silent sessions"): a session that holds a task and sends
nothing for 3 heartbeat intervals (one lease_ttl, 2 s here) is closed with ``unavailable`` and its
task released with no retry charge; HTTP/2 PINGs are answered at once but are not session frames,
so they do not keep a silent session open.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from urllib.parse import unquote

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.client import Client
from conveyor_sdk.types import TaskState
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker
from conveyor_server_min.testing import ServerProcess
from tests.conftest import FAST_ARGS
from tests.sdk_worker._helpers import KEEP, running, wait_state

from .fakes import SESSION
from .h2client import H2Client

LEASE = 2.0  # FAST_ARGS


async def _quiet_session(server: ServerProcess, queue: str) -> tuple[H2Client, int]:
    """A raw HTTP/2 session that says Hello and then sends nothing (its socket stays open and read)."""
    host, port = server.address.rsplit(":", 1)
    client = await H2Client().connect(host, int(port))
    sid = await client.open(SESSION)
    await client.send_msg(sid, pb.WorkerMessage(hello=pb.Hello(queues={queue: 1}, concurrency=1)))
    return client, sid


def test_a_worker_that_goes_quiet_loses_its_task_to_another_worker_without_a_retry(
    server: ServerProcess,
) -> None:
    """The quiet session ends (unavailable) after the bound; the task runs once on a real Worker, free."""
    ran: list[tuple[str, int]] = []
    reg = Registry()

    @reg.handler("quiet")
    async def handle(task: TaskData, ctx: TaskContext) -> None:
        ran.append((task.id, task.retried))

    async def main() -> None:
        quiet, sid = await _quiet_session(server, "silent-e2e")
        try:
            async with Client(server.url) as producer:
                info = await producer.enqueue("quiet", b"", queue="silent-e2e", **KEEP)
                frames = await quiet.server_messages(sid, 2)
                assert [m.WhichOneof("frame") for m in frames] == ["welcome", "dispatch"]
                assert frames[1].dispatch.task.id == info.id
                leased = time.monotonic()
                while not quiet.streams[sid].done:  # PINGs are answered, but are not session frames
                    await quiet.ping(timeout=2)
                    await asyncio.sleep(0.2)
                    assert time.monotonic() - leased < LEASE + 5, "the quiet session was never closed"
                closed_after = time.monotonic() - leased
                trailers = quiet.streams[sid].trailers
                assert trailers.get("grpc-status") == "14", trailers
                assert "nothing received for" in unquote(trailers.get("grpc-message", "")), trailers
                assert closed_after >= LEASE * 0.9, closed_after
                stored = await producer.get_task(info.id)
                assert (stored.state, stored.retried) == (TaskState.PENDING, 0)
                async with running(Worker(server.url, queues=["silent-e2e"], concurrency=1), reg):
                    done = await wait_state(producer, info.id, TaskState.COMPLETED)
                assert (done.retried, ran) == (0, [(info.id, 0)])
                await quiet.ping(timeout=2)  # the connection itself is still served
        finally:
            await quiet.close()

    asyncio.run(main())


def test_pings_are_answered_promptly_on_a_session_connection(server: ServerProcess) -> None:
    """Ten PINGs on a connection carrying a live session holding a task are each acknowledged within 1 s."""

    async def main() -> None:
        quiet, sid = await _quiet_session(server, "silent-ping")
        try:
            async with Client(server.url) as producer:
                await producer.enqueue("ping", b"", queue="silent-ping", **KEEP)
                await quiet.server_messages(sid, 2)
                worst = 0.0
                for _ in range(10):
                    sent = time.monotonic()
                    await quiet.ping(timeout=5)
                    worst = max(worst, time.monotonic() - sent)
                assert worst < 1.0, f"slowest PING ACK took {worst:.3f}s"
        finally:
            await quiet.close()

    asyncio.run(main())


def test_the_rule_is_off_with_silent_session_intervals_0(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """--silent-session-intervals 0: the quiet session stays open and its lease lapses, charged a retry."""
    server = server_factory([*FAST_ARGS, "--silent-session-intervals", "0"])

    async def main() -> None:
        quiet, sid = await _quiet_session(server, "silent-off")
        try:
            async with Client(server.url) as producer:
                info = await producer.enqueue("off", b"", queue="silent-off", **KEEP)
                await quiet.server_messages(sid, 2)
                lapsed = await wait_state(producer, info.id, TaskState.RETRY, timeout=LEASE + 10)
                assert (lapsed.retried, lapsed.last_error) == (1, "lease expired")
                assert not quiet.streams[sid].done
        finally:
            await quiet.close()

    asyncio.run(main())


def test_a_bad_silent_session_intervals_is_one_line_and_exit_2() -> None:
    """A non-integer value is refused before the server starts, naming the flag."""
    cmd = [sys.executable, "-m", "conveyor_server_min", "--dev", "--silent-session-intervals", "often"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --silent-session-intervals must be an integer, got 'often'"
    ], proc.stderr
