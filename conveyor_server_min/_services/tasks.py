"""TaskService: Enqueue, EnqueueBatch, EnqueueTx, GetTask.

Enqueue replies describe the task as committed, before dispatch: they show the initial state (§6.1) even
when an idle worker takes the task at once (the engine encodes them from a snapshot, after the Dispatch).
"""

from __future__ import annotations

from functools import partial

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import ConveyorError, InvalidArgument, NotFound
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.model import Task
from conveyor_server_min._services.convert import enqueue_response, fill_task_info, task_info, task_info_safe
from conveyor_server_min._services.validate import build_task, check_batch_size
from conveyor_server_min.service_api import CallContext, UnaryMethod

__all__ = ["TaskService"]

_PREFIX = "/conveyor.v1.TaskService/"
TASK_NOT_FOUND = "broker: task not found"


class TaskService:
    """Producer-side RPCs over an :class:`Engine`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def methods(self) -> list[UnaryMethod]:
        return [
            UnaryMethod(_PREFIX + "Enqueue", pb.EnqueueRequest, pb.EnqueueResponse, self.enqueue),
            UnaryMethod(
                _PREFIX + "EnqueueBatch",
                pb.EnqueueBatchRequest,
                pb.EnqueueBatchResponse,
                self.enqueue_batch,
            ),
            UnaryMethod(_PREFIX + "EnqueueTx", pb.EnqueueTxRequest, pb.EnqueueTxResponse, self.enqueue_tx),
            UnaryMethod(_PREFIX + "GetTask", pb.GetTaskRequest, pb.GetTaskResponse, self.get_task),
        ]

    def _build(self, req: pb.EnqueueRequest, now: int | None = None) -> Task:
        engine = self.engine
        return build_task(
            req,
            now=engine.clock.now() if now is None else now,
            new_id=engine.new_id,
            default_max_retry=engine.config.default_max_retry,
        )

    def enqueue(self, req: pb.EnqueueRequest, ctx: CallContext) -> pb.EnqueueResponse:
        # A plain function (see UnaryMethod): the engine commits in memory, nothing to wait for.
        engine = self.engine
        now = engine.clock.now()
        return engine.enqueue(self._build(req, now), enqueue_response, now=now)

    async def enqueue_batch(self, req: pb.EnqueueBatchRequest, ctx: CallContext) -> pb.EnqueueBatchResponse:
        check_batch_size(len(req.tasks))
        response = pb.EnqueueBatchResponse()
        engine = self.engine
        for item in req.tasks:
            result = response.results.add()
            try:
                now = engine.clock.now()
                engine.enqueue(self._build(item, now), partial(fill_task_info, result.task), now=now)
            except ConveyorError as exc:  # raised before anything was written into result.task
                result.error = exc.message or exc.code.connect_name
        return response

    async def enqueue_tx(self, req: pb.EnqueueTxRequest, ctx: CallContext) -> pb.EnqueueTxResponse:
        check_batch_size(len(req.tasks))
        tasks = []
        for index, item in enumerate(req.tasks):
            try:
                tasks.append(self._build(item))
            except InvalidArgument as exc:
                raise InvalidArgument(f"task {index}: {exc.message}") from None
        return pb.EnqueueTxResponse(tasks=self.engine.enqueue_tx(tasks, task_info))

    async def get_task(self, req: pb.GetTaskRequest, ctx: CallContext) -> pb.GetTaskResponse:
        if not req.id:
            raise InvalidArgument("task id is required")
        task = self.engine.get(req.id)
        if task is None:
            raise NotFound(TASK_NOT_FOUND)
        return pb.GetTaskResponse(task=task_info_safe(task))
