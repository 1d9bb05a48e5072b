"""A small in-memory ServiceSet and an in-thread server for transport tests (no engine needed)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from google.protobuf.message import Message

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import InvalidArgument, NotFound, ProtocolError
from conveyor_server_min.config import ServerConfig
from conveyor_server_min.server import Server
from conveyor_server_min.service_api import CallContext, ServerStreamMethod, UnaryMethod

ENQUEUE = "/conveyor.v1.TaskService/Enqueue"
GET_TASK = "/conveyor.v1.TaskService/GetTask"
WATCH = "/conveyor.v1.AdminService/WatchEvents"
SESSION = "/conveyor.v1.WorkerService/Session"


class RecordingTransport:
    """An asyncio transport for a server connection without a socket: records writes; the rest is a no-op."""

    def __init__(self) -> None:
        self.written = bytearray()

    def write(self, data: bytes) -> None:
        self.written += data

    def get_write_buffer_size(self) -> int:
        return 0

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


class FakeServices:
    """Echo Enqueue/GetTask, a counting WatchEvents, and a scripted Session.

    Enqueue echoes the request into ``task`` (payload included). Special ``type``
    values: ``not-found`` raises NotFound, ``boom`` raises RuntimeError, ``slow``
    waits forever. Session: Welcome after Hello; ``labels["dispatch"] = "N"`` pushes
    N Dispatches whose payload size is ``labels["size"]``; each Result is recorded;
    the handler records how it ended in ``ended`` (``"clean"``, ``"cancelled"``,
    ``"error"``).
    """

    def __init__(self) -> None:
        self.unary = {
            ENQUEUE: UnaryMethod(ENQUEUE, pb.EnqueueRequest, pb.EnqueueResponse, self.enqueue),
            GET_TASK: UnaryMethod(GET_TASK, pb.GetTaskRequest, pb.GetTaskResponse, self.get_task),
        }
        self.server_streams = {
            WATCH: ServerStreamMethod(WATCH, pb.WatchEventsRequest, tpb.TaskEvent, self.watch),
        }
        self.results: list[str] = []
        self.ended: list[str] = []
        self.headers_seen: list[dict[str, str]] = []
        self.inline: list[bool] = []
        self.started = False
        self.stopped = False
        self._stop: asyncio.Event | None = None

    async def enqueue(self, req: Message, ctx: CallContext) -> Message:
        assert isinstance(req, pb.EnqueueRequest)
        self.headers_seen.append(dict(ctx.headers))
        self.inline.append(asyncio.current_task() is None)  # started inline by the transport
        if req.type == "not-found":
            raise NotFound("no such thing")
        if req.type == "boom":
            raise RuntimeError("handler bug")
        if req.type == "slow":
            await asyncio.Event().wait()
        task = pb.TaskInfo(id=req.task_id or "t-1", queue=req.queue or "default", type=req.type)
        task.payload = req.payload
        return pb.EnqueueResponse(task=task)

    async def get_task(self, req: Message, ctx: CallContext) -> Message:
        assert isinstance(req, pb.GetTaskRequest)
        if not req.id:
            raise InvalidArgument("id is required")
        return pb.GetTaskResponse(task=pb.TaskInfo(id=req.id))

    async def watch(self, req: Message, ctx: CallContext) -> AsyncIterator[Message]:
        assert isinstance(req, pb.WatchEventsRequest)
        for i in range(3):
            yield tpb.TaskEvent(id=f"e{i}", queue=",".join(req.queues))

    async def session(
        self,
        ctx: CallContext,
        recv: AsyncIterator[pb.WorkerMessage],
        send: Callable[[pb.ServerMessage], Awaitable[None]],
        *,
        send_nowait: Callable[[pb.ServerMessage, bool], bool] | None = None,
    ) -> None:
        try:
            await self._session(recv, send)
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        except Exception:
            self.ended.append("error")
            raise
        self.ended.append("clean")

    async def _session(
        self, recv: AsyncIterator[pb.WorkerMessage], send: Callable[[pb.ServerMessage], Awaitable[None]]
    ) -> None:
        assert self._stop is not None
        it = aiter(recv)
        first = await anext(it, None)
        if first is None:
            return
        if first.WhichOneof("frame") != "hello":
            raise ProtocolError("protocol violation: first frame must be Hello")
        await send(pb.ServerMessage(welcome=pb.Welcome(session_id="s-1")))
        count = int(first.hello.labels.get("dispatch", "0"))
        size = int(first.hello.labels.get("size", "0"))
        for i in range(count):
            env = tpb.TaskEnvelope(id=f"task-{i}", queue="q", type="t", payload=b"x" * size)
            await send(pb.ServerMessage(dispatch=pb.Dispatch(task=env)))
        stop_wait = asyncio.ensure_future(self._stop.wait())
        try:
            while True:
                nxt = asyncio.ensure_future(anext(it, None))
                done, _ = await asyncio.wait({nxt, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if nxt not in done:
                    nxt.cancel()
                    return
                msg = nxt.result()
                if msg is None:
                    return
                if msg.WhichOneof("frame") == "result":
                    self.results.append(msg.result.task_id)
        finally:
            stop_wait.cancel()

    async def start(self) -> None:
        self.started = True
        self._stop = asyncio.Event()

    async def stop(self) -> None:
        self.stopped = True
        if self._stop is not None:
            self._stop.set()


class ThreadServer:
    """Runs :class:`Server` with given services on its own event loop in a thread."""

    def __init__(self, services: Any, *, web: Any = None, **config: Any) -> None:
        config.setdefault("port", 0)
        config.setdefault("dev", True)
        self.config = ServerConfig(**config)
        self.services = services
        self.web = web
        self.server: Server | None = None
        self.url = ""
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-server", daemon=True)

    def __enter__(self) -> ThreadServer:
        self._thread.start()
        self.server = Server(self.config, services=self.services, web=self.web)
        self.url = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run a sync function on the server loop and return its result."""

        async def wrap() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(10)

    def stop(self) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(20)
            self.server = None

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()
