"""Wire envelopes -> the plain :class:`TaskData` / :class:`Job` values executors receive."""

from __future__ import annotations

from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._protocol.inflight import Delivery, seconds
from conveyor_sdk._worker._build import new_job, new_task_data
from conveyor_sdk._worker.executor import Job, TaskData
from conveyor_sdk._worker.registry import HandlerSpec

__all__ = ["job_for_delivery", "task_data"]


def task_data(env: tpb.TaskEnvelope, group: str = "", single: Delivery | None = None) -> TaskData:
    """Copy one envelope into a TaskData (payload bytes, metadata dict, time bounds in seconds).

    ``group`` (from BatchDispatch.group) fills in when the envelope's options carry none.
    ``single``: the Delivery of a Dispatch (not a batch) whose only envelope ``env`` is; its
    id, queue, type, group and deadline were read from ``env`` already and are taken from it.
    """
    opts = env.options
    if single is None:
        id_, queue, type_, group = env.id, env.queue, env.type, opts.group or group
        deadline = seconds(opts.deadline) if opts.HasField("deadline") else None
    else:
        id_, queue, type_, group, deadline = (
            single.job_id,
            single.queue,
            single.type,
            single.group,
            single.task_deadline,
        )
    return new_task_data(  # TaskData's fields, in order
        id_,
        queue,
        type_,
        bytes(env.payload),
        env.content_type,
        # Most tasks carry no metadata, and dict() of a map field walks the Mapping ABC in Python
        # even when it is empty.
        dict(env.metadata) if env.metadata else {},
        env.retried,
        opts.max_retry,
        seconds(env.enqueued_at) if env.HasField("enqueued_at") else None,
        seconds(opts.timeout) if opts.HasField("timeout") else None,
        deadline,
        group,
        seconds(opts.process_at) if opts.HasField("process_at") else None,
    )


def job_for_delivery(delivery: Delivery, spec: HandlerSpec | None, deadline: float | None = None) -> Job:
    """The Job for a delivery, given its handler (``spec``; None: none is registered).

    A batch-typed task delivered alone becomes a batch of one.
    """
    batch = delivery.batch or (spec is not None and spec.batch)
    return new_job(  # Job's fields, in order
        delivery.job_id,
        delivery.queue,
        delivery.type,
        (
            (task_data(delivery.tasks[0], single=delivery),)
            if not delivery.batch  # a Dispatch: one envelope, read once
            else tuple([task_data(t, delivery.group) for t in delivery.tasks])
        ),
        batch,
        deadline,
    )
