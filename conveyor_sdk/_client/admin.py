"""Operator surface (AdminService subset): ``client.admin`` for the async and sync clients.

Kept off the producer classes so their API stays small. Reads (list_*) are
retried after ``unavailable``; task and queue actions are not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from conveyor_sdk._client import requests as rq
from conveyor_sdk._client.admin_ops import AsyncOps, SyncOps
from conveyor_sdk._client.convert import action_results, queue_info, session_info, task_page
from conveyor_sdk._client.transport import UnaryCaller
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.codecs import CodecRegistry
from conveyor_sdk.types import (
    Duration,
    QueueInfo,
    TaskActionResult,
    TaskInfo,
    TaskPage,
    TaskState,
    WorkerSessionInfo,
)

if TYPE_CHECKING:
    from conveyor_sdk._transport._connect import Dialer

__all__ = ["AsyncAdmin", "BatchAction", "SyncAdmin"]

BatchAction = Literal["cancel", "delete", "run", "archive"]

# action -> (RPC name, generated method name, request class)
_TASK_ACTIONS = {
    "cancel": ("CancelTask", "cancel_task", pb.CancelTaskRequest),
    "delete": ("DeleteTask", "delete_task", pb.DeleteTaskRequest),
    "run": ("RunTask", "run_task", pb.RunTaskRequest),
    "archive": ("ArchiveTask", "archive_task", pb.ArchiveTaskRequest),
}
_BATCH_ACTIONS = {
    "cancel": ("BatchCancelTasks", "batch_cancel_tasks"),
    "delete": ("BatchDeleteTasks", "batch_delete_tasks"),
    "run": ("BatchRunTasks", "batch_run_tasks"),
    "archive": ("BatchArchiveTasks", "batch_archive_tasks"),
}


def _batch_method(action: str) -> tuple[str, str]:
    try:
        return _BATCH_ACTIONS[action]
    except KeyError:
        raise ValueError(f"unknown batch action {action!r}; choose cancel, delete, run or archive") from None


class AsyncAdmin(AsyncOps):
    """Operator calls for :class:`~conveyor_sdk.client.Client`: tasks, queues, sessions here;
    cron, limits, groups, info and events in :class:`~conveyor_sdk._client.admin_ops.AsyncOps`.

    ``dialer`` is the Client's: the one call that opens its own connection (``server_version``'s
    worker-session handshake) opens it there, never on the network behind the caller's back."""

    def __init__(
        self,
        caller: UnaryCaller,
        stub: Any,
        codecs: CodecRegistry | None = None,
        *,
        dialer: Dialer | None = None,
    ) -> None:
        self._caller = caller
        self._stub = stub
        self._codecs = codecs if codecs is not None else CodecRegistry.default()
        self._dialer = dialer

    async def _task_action(self, action: str, id: str) -> None:
        rpc, method, cls = _TASK_ACTIONS[action]
        await self._caller.acall(rpc, getattr(self._stub, method), cls(id=rq.task_id(id)))

    async def list_tasks(
        self,
        *,
        queue: str | None = None,
        state: TaskState | str | None = None,
        limit: int = 0,
        page_token: str = "",
    ) -> TaskPage:
        """One page of tasks, newest id first (``limit`` 0 = server default 50, max 1000)."""
        req = rq.list_tasks(queue, state, limit, page_token)
        return task_page(await self._caller.acall("ListTasks", self._stub.list_tasks, req))

    async def iter_tasks(
        self, *, queue: str | None = None, state: TaskState | str | None = None, page_size: int = 100
    ) -> AsyncIterator[TaskInfo]:
        """Every matching task, following page tokens."""
        token = ""
        while True:
            page = await self.list_tasks(queue=queue, state=state, limit=page_size, page_token=token)
            for item in page.tasks:
                yield item
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def cancel_task(self, id: str) -> None:
        """Cancel a waiting task (an active one gets a best-effort Cancel frame)."""
        await self._task_action("cancel", id)

    async def delete_task(self, id: str) -> None:
        """Delete a task that is not active."""
        await self._task_action("delete", id)

    async def run_task(self, id: str) -> None:
        """Make a scheduled/retry/archived task due now."""
        await self._task_action("run", id)

    async def archive_task(self, id: str) -> None:
        """Dead-letter a waiting task."""
        await self._task_action("archive", id)

    async def reschedule_task(
        self, id: str, *, process_at: datetime | None = None, process_in: Duration | None = None
    ) -> None:
        """Move a waiting task to a new due time (exactly one of the two)."""
        req = rq.reschedule(id, process_at, process_in)
        await self._caller.acall("RescheduleTask", self._stub.reschedule_task, req)

    async def batch(self, action: BatchAction, ids: Sequence[str]) -> list[TaskActionResult]:
        """Apply ``action`` to 1..1000 ids; per-id results in order."""
        rpc, method = _batch_method(action)
        resp = await self._caller.acall(rpc, getattr(self._stub, method), rq.batch_ids(ids))
        return action_results(resp)

    async def list_queues(self) -> list[QueueInfo]:
        """Every queue with tasks or a pause flag, sorted by name."""
        resp = await self._caller.acall("ListQueues", self._stub.list_queues, pb.ListQueuesRequest())
        return [queue_info(q) for q in resp.queues]

    async def pause_queue(self, queue: str) -> None:
        """Stop dispatching from ``queue``."""
        req = pb.PauseQueueRequest(queue=rq.queue_name(queue))
        await self._caller.acall("PauseQueue", self._stub.pause_queue, req)

    async def resume_queue(self, queue: str) -> None:
        """Resume dispatching from ``queue``."""
        req = pb.ResumeQueueRequest(queue=rq.queue_name(queue))
        await self._caller.acall("ResumeQueue", self._stub.resume_queue, req)

    async def list_sessions(self) -> list[WorkerSessionInfo]:
        """Worker sessions connected to the answering node."""
        req = pb.ListWorkerSessionsRequest()
        resp = await self._caller.acall("ListWorkerSessions", self._stub.list_worker_sessions, req)
        return [session_info(s) for s in resp.sessions]


class SyncAdmin(SyncOps):
    """Blocking twin of :class:`AsyncAdmin` for :class:`~conveyor_sdk.client.SyncClient`."""

    def __init__(self, caller: UnaryCaller, stub: Any, codecs: CodecRegistry | None = None) -> None:
        self._caller = caller
        self._stub = stub
        self._codecs = codecs if codecs is not None else CodecRegistry.default()

    def _task_action(self, action: str, id: str) -> None:
        rpc, method, cls = _TASK_ACTIONS[action]
        self._caller.call(rpc, getattr(self._stub, method), cls(id=rq.task_id(id)))

    def list_tasks(
        self,
        *,
        queue: str | None = None,
        state: TaskState | str | None = None,
        limit: int = 0,
        page_token: str = "",
    ) -> TaskPage:
        """One page of tasks, newest id first."""
        req = rq.list_tasks(queue, state, limit, page_token)
        return task_page(self._caller.call("ListTasks", self._stub.list_tasks, req))

    def iter_tasks(
        self, *, queue: str | None = None, state: TaskState | str | None = None, page_size: int = 100
    ) -> Iterator[TaskInfo]:
        """Every matching task, following page tokens."""
        token = ""
        while True:
            page = self.list_tasks(queue=queue, state=state, limit=page_size, page_token=token)
            yield from page.tasks
            if not page.next_page_token:
                return
            token = page.next_page_token

    def cancel_task(self, id: str) -> None:
        """Cancel a waiting task."""
        self._task_action("cancel", id)

    def delete_task(self, id: str) -> None:
        """Delete a task that is not active."""
        self._task_action("delete", id)

    def run_task(self, id: str) -> None:
        """Make a task due now."""
        self._task_action("run", id)

    def archive_task(self, id: str) -> None:
        """Dead-letter a waiting task."""
        self._task_action("archive", id)

    def reschedule_task(
        self, id: str, *, process_at: datetime | None = None, process_in: Duration | None = None
    ) -> None:
        """Move a waiting task to a new due time."""
        req = rq.reschedule(id, process_at, process_in)
        self._caller.call("RescheduleTask", self._stub.reschedule_task, req)

    def batch(self, action: BatchAction, ids: Sequence[str]) -> list[TaskActionResult]:
        """Apply ``action`` to 1..1000 ids."""
        rpc, method = _batch_method(action)
        return action_results(self._caller.call(rpc, getattr(self._stub, method), rq.batch_ids(ids)))

    def list_queues(self) -> list[QueueInfo]:
        """Every queue, sorted by name."""
        resp = self._caller.call("ListQueues", self._stub.list_queues, pb.ListQueuesRequest())
        return [queue_info(q) for q in resp.queues]

    def pause_queue(self, queue: str) -> None:
        """Stop dispatching from ``queue``."""
        req = pb.PauseQueueRequest(queue=rq.queue_name(queue))
        self._caller.call("PauseQueue", self._stub.pause_queue, req)

    def resume_queue(self, queue: str) -> None:
        """Resume dispatching from ``queue``."""
        req = pb.ResumeQueueRequest(queue=rq.queue_name(queue))
        self._caller.call("ResumeQueue", self._stub.resume_queue, req)

    def list_sessions(self) -> list[WorkerSessionInfo]:
        """Worker sessions connected to the answering node."""
        req = pb.ListWorkerSessionsRequest()
        resp = self._caller.call("ListWorkerSessions", self._stub.list_worker_sessions, req)
        return [session_info(s) for s in resp.sessions]
