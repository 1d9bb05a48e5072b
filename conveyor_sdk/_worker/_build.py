"""Positional constructors for the frozen dataclasses built for every delivered task."""

from __future__ import annotations

from collections.abc import Callable

from conveyor_sdk._protocol.build import positional_builder
from conveyor_sdk._worker.executor import Job, TaskData

__all__ = ["new_job", "new_task_data", "positional_builder"]

# ``new_task_data(id, queue, type, payload, content_type, metadata, retried, max_retry,
# enqueued_at, timeout, task_deadline, group, process_at)`` and ``new_job(job_id, queue, type, tasks,
# batch, deadline)``: every field, in the order the classes declare them.
new_task_data: Callable[..., TaskData] = positional_builder(TaskData)
new_job: Callable[..., Job] = positional_builder(Job)
