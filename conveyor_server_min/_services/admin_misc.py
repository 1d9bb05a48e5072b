"""AdminService odds and ends: cluster/broker info, worker sessions, WatchEvents, and the RPCs this
server does not implement (webhooks), which answer ``unimplemented`` at once."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Unavailable, Unimplemented
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.events import Subscription
from conveyor_server_min._services.convert import event_message, timestamp
from conveyor_server_min._services.session import SessionHandler
from conveyor_server_min.service_api import CallContext, ServerStreamMethod, UnaryMethod

__all__ = ["MiscAdmin"]

PREFIX = "/conveyor.v1.AdminService/"
_UNIMPLEMENTED = [
    ("ListWebhookWorkers", pb.ListWebhookWorkersRequest, pb.ListWebhookWorkersResponse),
    ("UpsertWebhookWorker", pb.UpsertWebhookWorkerRequest, pb.UpsertWebhookWorkerResponse),
    ("PauseWebhookWorker", pb.PauseWebhookWorkerRequest, pb.PauseWebhookWorkerResponse),
    ("ResumeWebhookWorker", pb.ResumeWebhookWorkerRequest, pb.ResumeWebhookWorkerResponse),
    ("DeleteWebhookWorker", pb.DeleteWebhookWorkerRequest, pb.DeleteWebhookWorkerResponse),
]
_WEBHOOK_SERVICE = [
    ("/conveyor.v1.WebhookService/Heartbeat", pb.WebhookHeartbeatRequest, pb.WebhookHeartbeatResponse),
    (
        "/conveyor.v1.WebhookService/ReportResult",
        pb.WebhookReportResultRequest,
        pb.WebhookReportResultResponse,
    ),
]
_STATE_NAMES = {s: tpb.TaskState.Name(s).removeprefix("TASK_STATE_").lower() for s in range(1, 10)}


def _unimplemented(path: str) -> Callable[..., Awaitable[Any]]:
    async def handler(req: Any, ctx: CallContext) -> Any:
        raise Unimplemented(f"{path} is not implemented by this server")

    return handler


class MiscAdmin:
    """Info RPCs, WatchEvents and the unimplemented surface."""

    def __init__(self, engine: Engine, sessions: SessionHandler) -> None:
        self.engine = engine
        self.sessions = sessions
        self._stopping = asyncio.Event()

    def methods(self) -> list[UnaryMethod]:
        out = [
            UnaryMethod(
                PREFIX + "ClusterInfo", pb.ClusterInfoRequest, pb.ClusterInfoResponse, self.cluster_info
            ),
            UnaryMethod(
                PREFIX + "ListWorkerSessions", pb.ListWorkerSessionsRequest, pb.ListWorkerSessionsResponse,
                self.list_sessions,
            ),
            UnaryMethod(PREFIX + "BrokerInfo", pb.BrokerInfoRequest, pb.BrokerInfoResponse, self.broker_info),
        ]  # fmt: skip
        out += [UnaryMethod(PREFIX + n, rq, rs, _unimplemented(PREFIX + n)) for n, rq, rs in _UNIMPLEMENTED]
        out += [UnaryMethod(p, rq, rs, _unimplemented(p)) for p, rq, rs in _WEBHOOK_SERVICE]
        return out

    def streams(self) -> list[ServerStreamMethod]:
        return [ServerStreamMethod(PREFIX + "WatchEvents", pb.WatchEventsRequest, tpb.TaskEvent, self.watch)]

    async def stop(self) -> None:
        self._stopping.set()

    async def cluster_info(self, req: Any, ctx: CallContext) -> pb.ClusterInfoResponse:
        address = self.engine.config.extras.get("address") or socket.gethostname()
        node = pb.NodeInfo(address=address, started_at=timestamp(self.engine.started_at))
        return pb.ClusterInfoResponse(nodes=[node])

    async def list_sessions(self, req: Any, ctx: CallContext) -> pb.ListWorkerSessionsResponse:
        out = pb.ListWorkerSessionsResponse()
        for sid, s in sorted(self.engine.dispatcher.sessions.items()):
            out.sessions.add(
                id=sid, queues=sorted(s.queues), concurrency=s.concurrency, sdk_version=s.sdk_version,
                connected_at=timestamp(s.connected_at),
            )  # fmt: skip
        return out

    async def broker_info(self, req: Any, ctx: CallContext) -> pb.BrokerInfoResponse:
        broker = self.engine.broker
        totals = [0] * 10
        for counts in broker.counts().values():
            totals = [a + b for a, b in zip(totals, counts, strict=True)]
        sessions = self.engine.dispatcher.sessions
        metrics = {"tasks": str(broker.size()), "sessions": str(len(sessions))}
        metrics.update({_STATE_NAMES[s]: str(totals[s]) for s in range(1, 10)})
        for sid, session in sessions.items():  # what WorkerSession cannot carry (see docs/dashboard.md)
            metrics[f"session/{sid}/in_flight"] = str(len(session.by_task))
            weights = sorted(session.queues.items())
            metrics[f"session/{sid}/weights"] = ",".join(f"{q}={w}" for q, w in weights)
        return pb.BrokerInfoResponse(driver=broker.driver, metrics=metrics)

    async def watch(self, req: pb.WatchEventsRequest, ctx: CallContext) -> AsyncIterator[tpb.TaskEvent]:
        hub = self.engine.events
        if not hub.enabled:
            raise Unavailable("lifecycle events are disabled on this server")
        sub = Subscription(frozenset(req.queues), frozenset(int(t) for t in req.event_types))
        arrived = asyncio.Event()
        sub.notify = arrived.set
        hub.subscribe(sub)
        try:
            while not self._stopping.is_set():
                while sub.buffer:
                    yield event_message(sub.buffer.popleft())
                arrived.clear()
                await _first(arrived, self._stopping)
        finally:
            hub.unsubscribe(sub)


async def _first(*events: asyncio.Event) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
