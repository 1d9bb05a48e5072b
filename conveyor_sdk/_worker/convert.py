"""Wire envelopes -> the plain :class:`TaskData` / :class:`Job` values executors receive."""

from __future__ import annotations

from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._protocol.inflight import Delivery, seconds
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
    return TaskData(
        id=id_,
        queue=queue,
        type=type_,
        payload=bytes(env.payload),
        content_type=env.content_type,
        metadata=dict(env.metadata),
        retried=env.retried,
        max_retry=opts.max_retry,
        enqueued_at=seconds(env.enqueued_at) if env.HasField("enqueued_at") else None,
        timeout=seconds(opts.timeout) if opts.HasField("timeout") else None,
        task_deadline=deadline,
        group=group,
        process_at=seconds(opts.process_at) if opts.HasField("process_at") else None,
    )


def job_for_delivery(delivery: Delivery, spec: HandlerSpec | None, deadline: float | None = None) -> Job:
    """The Job for a delivery, given its handler (``spec``, None: none registered).

    A batch-typed task delivered alone becomes a batch of one.
    """
    batch = delivery.batch or (spec is not None and spec.batch)
    if delivery.batch:
        tasks = tuple(task_data(t, delivery.group) for t in delivery.tasks)
    else:  # a Dispatch: one envelope, read once
        tasks = (task_data(delivery.tasks[0], single=delivery),)
    return Job(
        job_id=delivery.job_id,
        queue=delivery.queue,
        type=delivery.type,
        tasks=tasks,
        batch=batch,
        deadline=deadline,
    )
