"""AdminService: queues, tasks, limits, group configs, sessions, cluster/broker info, WatchEvents.

Cron lives in :mod:`.cron`; webhook RPCs answer ``unimplemented`` at once (see :mod:`.admin_misc`).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import ConveyorError, InvalidArgument
from conveyor_server_min._engine.admin import AdminOps
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.limits import GroupConfig
from conveyor_server_min._services.admin_misc import MiscAdmin
from conveyor_server_min._services.bounds import MAX_NAME, check_size
from conveyor_server_min._services.convert import (
    duration,
    duration_ns,
    instant_after,
    task_info_safe,
    timestamp_ns,
)
from conveyor_server_min._services.cron import CronService
from conveyor_server_min._services.session import SessionHandler
from conveyor_server_min._services.validate import MAX_BATCH, check_queue_name, check_task_id
from conveyor_server_min.service_api import CallContext, ServerStreamMethod, UnaryMethod

__all__ = ["AdminService"]

PREFIX = "/conveyor.v1.AdminService/"
_LIST_DEFAULT, _LIST_MAX = 50, 1000


def _queue(name: str) -> str:
    if not name:
        raise InvalidArgument("queue name is required")
    check_queue_name(name)
    return name


def _task_id(task_id: str) -> str:
    if not task_id:
        raise InvalidArgument("task id is required")
    check_task_id(task_id)
    return task_id


def unary(name: str, fn: Callable[..., Awaitable[Any]], req: Any = None, resp: Any = None) -> UnaryMethod:
    """An AdminService method; message types default to ``pb.<name>Request`` / ``pb.<name>Response``."""
    req = req or getattr(pb, name + "Request")
    resp = resp or getattr(pb, name + "Response")
    return UnaryMethod(PREFIX + name, req, resp, fn)


class AdminService:
    """Operator RPCs over an :class:`Engine`."""

    def __init__(self, engine: Engine, sessions: SessionHandler) -> None:
        self.engine = engine
        self.ops = AdminOps(engine)
        self.misc = MiscAdmin(engine, sessions)
        self.cron = CronService(engine)

    def methods(self) -> list[UnaryMethod]:
        return [*self._queue_methods(), *self._task_methods(), *self._limit_methods(), *self.misc.methods(),
                *self.cron.methods()]  # fmt: skip

    def streams(self) -> list[ServerStreamMethod]:
        return self.misc.streams()

    async def stop(self) -> None:
        await self.misc.stop()

    # --- queues ----------------------------------------------------------------------------------
    def _queue_methods(self) -> list[UnaryMethod]:
        return [
            unary("ListQueues", self.list_queues),
            unary("PauseQueue", self.pause_queue),
            unary("ResumeQueue", self.resume_queue),
            unary("ListTasks", self.list_tasks),
        ]

    async def list_queues(self, req: pb.ListQueuesRequest, ctx: CallContext) -> pb.ListQueuesResponse:
        out = pb.ListQueuesResponse()
        for q in self.ops.queues():
            c = q.counts
            out.queues.add(
                name=q.name, paused=q.paused, scheduled=c[1], pending=c[2], active=c[3], retry=c[4],
                completed=c[5], archived=c[6], aggregating=c[8], blocked=c[9],
            )  # fmt: skip
        return out

    async def pause_queue(self, req: pb.PauseQueueRequest, ctx: CallContext) -> pb.PauseQueueResponse:
        self.ops.set_paused(_queue(req.queue), True)
        return pb.PauseQueueResponse()

    async def resume_queue(self, req: pb.ResumeQueueRequest, ctx: CallContext) -> pb.ResumeQueueResponse:
        self.ops.set_paused(_queue(req.queue), False)
        return pb.ResumeQueueResponse()

    async def list_tasks(self, req: pb.ListTasksRequest, ctx: CallContext) -> pb.ListTasksResponse:
        if req.limit < 0:
            raise InvalidArgument(f"limit must not be negative, got {req.limit}")
        limit = min(req.limit or _LIST_DEFAULT, _LIST_MAX)
        tasks, token = self.ops.list_tasks(req.queue, int(req.state), limit, req.page_token)
        return pb.ListTasksResponse(tasks=[task_info_safe(t) for t in tasks], next_page_token=token)

    # --- tasks -----------------------------------------------------------------------------------
    def _task_methods(self) -> list[UnaryMethod]:
        ops = self.ops
        single = [
            ("CancelTask", pb.CancelTaskRequest, pb.CancelTaskResponse, ops.cancel),
            ("DeleteTask", pb.DeleteTaskRequest, pb.DeleteTaskResponse, ops.delete),
            ("RunTask", pb.RunTaskRequest, pb.RunTaskResponse, ops.run),
            ("ArchiveTask", pb.ArchiveTaskRequest, pb.ArchiveTaskResponse, ops.archive),
        ]
        batch = [
            ("BatchDeleteTasks", ops.delete),
            ("BatchRunTasks", ops.run),
            ("BatchCancelTasks", lambda task_id: ops.cancel(task_id, allow_active=False)),
            ("BatchArchiveTasks", ops.archive),
        ]
        methods = [unary(n, self._single(rs, fn), rq, rs) for n, rq, rs, fn in single]
        methods += [unary(n, self._batch(fn), pb.BatchTasksRequest, pb.BatchTasksResponse) for n, fn in batch]
        methods.append(unary("RescheduleTask", self.reschedule))
        return methods

    @staticmethod
    def _single(resp: Any, action: Callable[[str], None]) -> Callable[..., Awaitable[Any]]:
        async def handler(req: Any, ctx: CallContext) -> Any:
            action(_task_id(req.id))
            return resp()

        return handler

    @staticmethod
    def _batch(action: Callable[[str], None]) -> Callable[..., Awaitable[pb.BatchTasksResponse]]:
        async def handler(req: pb.BatchTasksRequest, ctx: CallContext) -> pb.BatchTasksResponse:
            if not req.ids:
                raise InvalidArgument("ids must name at least one task")
            if len(req.ids) > MAX_BATCH:
                raise InvalidArgument(f"batch holds {len(req.ids)} ids, the maximum is {MAX_BATCH}")
            out = pb.BatchTasksResponse()
            for task_id in req.ids:
                try:
                    action(_task_id(task_id))
                except ConveyorError as exc:
                    out.results.add(id=task_id, error=exc.message or exc.code.connect_name)
                else:
                    out.results.add(id=task_id)
            return out

        return handler

    async def reschedule(self, req: pb.RescheduleTaskRequest, ctx: CallContext) -> pb.RescheduleTaskResponse:
        task_id = _task_id(req.id)
        if req.HasField("process_at") == req.HasField("process_in"):
            raise InvalidArgument("exactly one of process_at and process_in is required")
        at = timestamp_ns(req, "process_at")
        if at is None:
            at = instant_after(self.engine.now(), duration_ns(req, "process_in") or 0, "process_in")
        self.ops.reschedule(task_id, at)
        return pb.RescheduleTaskResponse()

    # --- limits and group configs ----------------------------------------------------------------
    def _limit_methods(self) -> list[UnaryMethod]:
        return [
            unary("ListRateLimits", self.list_rate),
            unary("SetQueueRateLimit", self.set_rate),
            unary("DeleteQueueRateLimit", self.delete_rate),
            unary("ListConcurrencyLimits", self.list_conc),
            unary("SetQueueConcurrencyLimit", self.set_conc),
            unary("DeleteQueueConcurrencyLimit", self.delete_conc),
            unary("ListGroupConfigs", self.list_groups),
            unary("SetGroupConfig", self.set_group),
            unary("DeleteGroupConfig", self.delete_group),
        ]  # fmt: skip

    async def list_rate(self, req: Any, ctx: CallContext) -> pb.ListRateLimitsResponse:
        limits = [pb.RateLimitInfo(queue=q, rate_per_sec=r, burst=b) for q, r, b in self.ops.rate_limits()]
        return pb.ListRateLimitsResponse(limits=limits)

    async def set_rate(
        self, req: pb.SetQueueRateLimitRequest, ctx: CallContext
    ) -> pb.SetQueueRateLimitResponse:
        queue = _queue(req.queue)
        if not (math.isfinite(req.rate_per_sec) and req.rate_per_sec > 0):
            raise InvalidArgument(f"rate_per_sec must be a finite number > 0, got {req.rate_per_sec}")
        if req.burst < 1:
            raise InvalidArgument(f"burst must be at least 1, got {req.burst}")
        self.ops.set_rate_limit(queue, req.rate_per_sec, req.burst)
        return pb.SetQueueRateLimitResponse()

    async def delete_rate(self, req: Any, ctx: CallContext) -> pb.DeleteQueueRateLimitResponse:
        self.ops.delete_rate_limit(_queue(req.queue))
        return pb.DeleteQueueRateLimitResponse()

    async def list_conc(self, req: Any, ctx: CallContext) -> pb.ListConcurrencyLimitsResponse:
        limits = [pb.ConcurrencyLimitInfo(queue=q, max_active=n) for q, n in self.ops.concurrency_limits()]
        return pb.ListConcurrencyLimitsResponse(limits=limits)

    async def set_conc(self, req: Any, ctx: CallContext) -> pb.SetQueueConcurrencyLimitResponse:
        queue = _queue(req.queue)
        if req.max_active < 1:
            raise InvalidArgument(f"max_active must be at least 1, got {req.max_active}")
        self.ops.set_concurrency_limit(queue, req.max_active)
        return pb.SetQueueConcurrencyLimitResponse()

    async def delete_conc(self, req: Any, ctx: CallContext) -> pb.DeleteQueueConcurrencyLimitResponse:
        self.ops.delete_concurrency_limit(_queue(req.queue))
        return pb.DeleteQueueConcurrencyLimitResponse()

    async def list_groups(self, req: Any, ctx: CallContext) -> pb.ListGroupConfigsResponse:
        out = pb.ListGroupConfigsResponse()
        for queue, group, cfg in self.ops.group_configs():
            out.configs.add(
                queue=queue, group=group, max_size=cfg.max_size,
                max_delay=duration(cfg.max_delay), grace_period=duration(cfg.grace_period),
            )  # fmt: skip
        return out

    async def set_group(self, req: pb.SetGroupConfigRequest, ctx: CallContext) -> pb.SetGroupConfigResponse:
        queue = _queue(req.queue)
        check_size("group", req.group, MAX_NAME)
        max_delay = duration_ns(req, "max_delay") or 0
        grace = duration_ns(req, "grace_period") or 0
        if req.max_size < 1:
            raise InvalidArgument(f"max_size must be at least 1, got {req.max_size}")
        if max_delay <= 0:
            raise InvalidArgument("max_delay must be positive")
        if grace <= 0:
            raise InvalidArgument("grace_period must be positive")
        self.ops.set_group_config(queue, req.group, GroupConfig(req.max_size, max_delay, grace))
        return pb.SetGroupConfigResponse()

    async def delete_group(
        self, req: pb.DeleteGroupConfigRequest, ctx: CallContext
    ) -> pb.DeleteGroupConfigResponse:
        self.ops.delete_group_config(_queue(req.queue), req.group)
        return pb.DeleteGroupConfigResponse()
