"""Complete unary requests start inline (no task unless the handler waits) and behave as in a task."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._protocol.framing import encode_frame
from conveyor_sdk.errors import DeadlineExceeded
from conveyor_server_min._http.deadline import with_timeout as _with_timeout
from conveyor_server_min._http.inline import handoff, start_inline

from .fakes import ENQUEUE, FakeServices, ThreadServer
from .h2client import H2Client, StreamState

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("_VAR", default="outside")


async def _from_callback(
    coro: Coroutine[Any, Any, None], name: str | None = None
) -> asyncio.Task[None] | None:
    """start_inline(coro) called from a plain loop callback, as a protocol's data_received is."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[asyncio.Task[None] | None] = loop.create_future()
    loop.call_soon(lambda: done.set_result(start_inline(coro, name)))
    return await done


def test_a_coroutine_that_never_waits_needs_no_task() -> None:
    """It runs to completion in the caller, in its own copy of the context (nothing leaks out)."""
    seen: list[object] = []

    async def handler() -> None:
        _VAR.set("inside")
        seen.append(asyncio.current_task())

    async def main() -> None:
        loop = asyncio.get_running_loop()
        before = len(asyncio.all_tasks(loop))
        assert await _from_callback(handler()) is None
        assert len(asyncio.all_tasks(loop)) == before
        assert _VAR.get() == "outside"

    asyncio.run(main())
    assert seen == [None]


def test_a_waiting_coroutine_is_continued_by_a_task_in_its_context() -> None:
    """After its first wait a task resumes it; after handoff() it runs inside that task."""
    steps: list[object] = []

    async def handler(gate: asyncio.Future[str]) -> None:
        _VAR.set("inside")
        steps.append(asyncio.current_task())
        steps.append(await gate)
        await handoff()
        steps.append((asyncio.current_task(), _VAR.get()))

    async def main() -> None:
        gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        task = await _from_callback(handler(gate), "h")
        assert task is not None and steps == [None]
        gate.set_result("woken")
        await asyncio.wait_for(task, 10)
        assert steps == [None, "woken", (task, "inside")]

    asyncio.run(main())


def test_the_call_deadline_works_for_a_handler_started_inline() -> None:
    """_with_timeout needs a task for its timer: started inline it hands off, then times out or returns."""

    async def sleeper(delay: float) -> str:
        await asyncio.sleep(delay)
        return "late"

    async def call(delay: float, out: list[object]) -> None:
        try:
            out.append(await _with_timeout(sleeper(delay), 0.05))
        except DeadlineExceeded as exc:
            out.append(exc)

    async def main() -> None:
        for delay, want in ((5.0, DeadlineExceeded), (0.0, str)):
            out: list[object] = []
            task = await _from_callback(call(delay, out))
            assert task is not None
            await asyncio.wait_for(task, 10)
            assert isinstance(out[0], want)

    asyncio.run(main())


def test_cancelling_the_continuing_task_reaches_the_handler() -> None:
    """A reset stream cancels the task; the cancellation is forwarded into the waiting handler."""
    cancelled: list[bool] = []

    async def handler() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        task = await _from_callback(handler())
        assert task is not None
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert cancelled == [True]


def test_a_cancel_before_the_continuing_tasks_first_step_still_reaches_the_handler() -> None:
    """Cancelled in the same turn it was made (a reset read with the request): the handler's except
    and finally run inside the task, and the future it waited on is cancelled."""
    seen: list[object] = []
    waited: list[asyncio.Future[None]] = []

    async def handler() -> None:
        fut = asyncio.get_running_loop().create_future()
        waited.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            seen.append(asyncio.current_task())
            raise

    async def main() -> None:
        loop = asyncio.get_running_loop()
        made: asyncio.Future[asyncio.Task[None] | None] = loop.create_future()

        def start_and_cancel() -> None:
            task = start_inline(handler(), "reset")
            assert task is not None
            task.cancel()
            made.set_result(task)

        loop.call_soon(start_and_cancel)
        task = await made
        assert task is not None
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        assert seen == [task]
        assert waited[0].cancelled()

    asyncio.run(main())


def test_requests_arriving_whole_run_inline_over_http2() -> None:
    """HEADERS + DATA in one write: answered (OK, or deadline_exceeded for a stuck handler) without a
    task first; a request whose body comes later is started as a task, as before."""
    services = FakeServices()

    async def main(port: int) -> None:
        client = await H2Client().connect("127.0.0.1", port)
        try:
            whole = []
            for kind, extra in (("ok", {}), ("slow", {"grpc-timeout": "200m"})):
                sid = client.conn.get_next_available_stream_id()
                headers = [(":method", "POST"), (":scheme", "http"), (":authority", "t"), (":path", ENQUEUE),
                           ("content-type", "application/grpc"), *extra.items()]  # fmt: skip
                client.streams[sid] = StreamState()
                client.conn.send_headers(sid, headers)
                client.conn.send_data(
                    sid, encode_frame(pb.EnqueueRequest(type=kind).SerializeToString()), True
                )
                await client._flush()
                whole.append(await client.wait(sid))
            assert whole[0].trailers["grpc-status"] == "0"
            assert (whole[1].trailers or whole[1].headers)["grpc-status"] == "4"
            sid = await client.open(ENQUEUE)
            await client.ping()  # the server has read the HEADERS alone: the handler starts as a task
            await client.send_msg(sid, pb.EnqueueRequest(type="later").SerializeToString(), end=True)
            assert (await client.wait(sid)).trailers["grpc-status"] == "0"
        finally:
            await client.close()

    with ThreadServer(services) as server:
        asyncio.run(main(server.port))
    assert services.inline == [True, True, False]
