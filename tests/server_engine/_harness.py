"""In-process harness for the engine and services: FakeClock, unary calls, scripted session streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from google.protobuf.message import Message

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import ConveyorError
from conveyor_server_min._engine.clock import FakeClock
from conveyor_server_min._services import Services, build_services
from conveyor_server_min.service_api import CallContext, EngineConfig

CTX = CallContext(peer="test", headers={})
TASK = "/conveyor.v1.TaskService/"
ADMIN = "/conveyor.v1.AdminService/"

FAST = EngineConfig(
    lease_ttl=2.0,
    reap_interval=0.2,
    promote_interval=0.1,
    group_max_size=3,
    group_grace_period=0.5,
    group_sweep_interval=0.1,
)


def make(
    config: EngineConfig = FAST, rand: float = 0.5, start: int | None = None
) -> tuple[Services, FakeClock]:
    clock = FakeClock() if start is None else FakeClock(start)
    return build_services(config, clock=clock, rand=lambda: rand), clock


async def call(services: Services, path: str, req: Any) -> Any:
    method = services.unary[path if path.startswith("/") else _guess(path)]
    result = method.handler(req, CTX)
    return result if isinstance(result, Message) else await result


def _guess(name: str) -> str:
    return (TASK if name in {"Enqueue", "EnqueueBatch", "EnqueueTx", "GetTask"} else ADMIN) + name


async def call_error(services: Services, path: str, req: Any) -> ConveyorError:
    try:
        await call(services, path, req)
    except ConveyorError as exc:
        return exc
    raise AssertionError(f"{path} did not fail")


async def enqueue(services: Services, **fields: Any) -> pb.TaskInfo:
    fields.setdefault("type", "t")
    resp = await call(services, "Enqueue", pb.EnqueueRequest(**fields))
    return resp.task


async def get(services: Services, task_id: str) -> pb.TaskInfo:
    return (await call(services, "GetTask", pb.GetTaskRequest(id=task_id))).task


class Worker:
    """Drives ``services.session`` with a queue-backed recv and a list-appending send."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.inbox: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()
        self.sent: list[pb.ServerMessage] = []
        self.task: asyncio.Task[None] | None = None
        self.seen = 0

    async def _recv(self) -> AsyncIterator[pb.WorkerMessage]:
        while True:
            msg = await self.inbox.get()
            if msg is None:
                return
            yield msg

    async def _send(self, msg: pb.ServerMessage) -> None:
        self.sent.append(msg)

    def start(self, **hello: Any) -> Worker:
        hello.setdefault("queues", {"default": 1})
        hello.setdefault("concurrency", 1)
        self.inbox.put_nowait(pb.WorkerMessage(hello=pb.Hello(**hello)))
        self.task = asyncio.ensure_future(self.services.session(CTX, self._recv(), self._send))
        return self

    async def open(self, **hello: Any) -> pb.Welcome:
        self.start(**hello)
        first = await self.next()
        assert first.WhichOneof("frame") == "welcome", first
        return first.welcome

    async def next(self, timeout: float = 5.0) -> pb.ServerMessage:
        """The next server frame not yet consumed (yields to the loop until it arrives)."""
        async with asyncio.timeout(timeout):
            while self.seen >= len(self.sent):
                if self.task is not None and self.task.done():
                    self.task.result()
                    raise AssertionError("session ended without sending the expected frame")
                await asyncio.sleep(0)
        self.seen += 1
        return self.sent[self.seen - 1]

    async def dispatch(self) -> pb.Dispatch:
        msg = await self.next()
        assert msg.WhichOneof("frame") == "dispatch", msg
        return msg.dispatch

    async def settle(self) -> None:
        """Let queued frames be processed."""
        for _ in range(50):  # yield to the loop: the reader drains the inbox synchronously per frame
            await asyncio.sleep(0)

    def pending(self) -> list[pb.ServerMessage]:
        """Frames sent but not yet consumed; marks them consumed."""
        out = self.sent[self.seen :]
        self.seen = len(self.sent)
        return out

    def send(self, **frame: Any) -> None:
        self.inbox.put_nowait(pb.WorkerMessage(**frame))

    def result(self, task_id: str, outcome: int = pb.TASK_OUTCOME_SUCCESS, error: str = "") -> None:
        self.send(result=pb.Result(task_id=task_id, outcome=outcome, error_msg=error))

    def heartbeat(self, *ids: str) -> None:
        self.send(heartbeat=pb.Heartbeat(active_task_ids=list(ids)))

    async def close(self) -> None:
        self.inbox.put_nowait(None)
        assert self.task is not None
        await asyncio.wait_for(self.task, 5)

    async def ended(self) -> BaseException | None:
        """Wait for the handler to end; returns its exception (None when clean)."""
        assert self.task is not None
        await asyncio.wait({self.task}, timeout=5)
        assert self.task.done()
        return self.task.exception()
