"""Wire envelopes -> the plain :class:`TaskData` / :class:`Job` values executors receive."""

from __future__ import annotations

from dataclasses import replace

from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._protocol.inflight import Delivery, seconds
from conveyor_sdk._worker.executor import Job, TaskData
from conveyor_sdk._worker.registry import Registry

__all__ = ["job_for_delivery", "task_data"]


def task_data(env: tpb.TaskEnvelope, group: str = "") -> TaskData:
    """Copy one envelope into a TaskData (payload bytes, metadata dict, time bounds in seconds).

    ``group`` (from BatchDispatch.group) fills in when the envelope's options carry none.
    """
    opts = env.options
    return TaskData(
        id=env.id,
        queue=env.queue,
        type=env.type,
        payload=bytes(env.payload),
        content_type=env.content_type,
        metadata=dict(env.metadata) if env.metadata else {},  # dict() of a map field walks Python ABCs
        retried=env.retried,
        max_retry=opts.max_retry,
        enqueued_at=seconds(env.enqueued_at) if env.HasField("enqueued_at") else None,
        timeout=seconds(opts.timeout) if opts.HasField("timeout") else None,
        task_deadline=seconds(opts.deadline) if opts.HasField("deadline") else None,
        group=opts.group or group,
    )


def job_for_delivery(delivery: Delivery, registry: Registry | None, deadline: float | None = None) -> Job:
    """The Job for a delivery. A batch-typed task delivered alone becomes a batch of one."""
    spec = registry.lookup(delivery.type) if registry is not None else None
    batch = delivery.batch or (spec is not None and spec.batch)
    return Job(
        job_id=delivery.job_id,
        queue=delivery.queue,
        type=delivery.type,
        tasks=tuple([task_data(t, delivery.group) for t in delivery.tasks]),
        batch=batch,
        deadline=deadline,
    )


def with_deadline(job: Job, deadline: float | None) -> Job:
    return job if job.deadline == deadline else replace(job, deadline=deadline)
