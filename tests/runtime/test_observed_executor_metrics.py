"""observe.ObservedExecutor: in-process jobs reach Metrics through the hooks the process executor calls."""

from __future__ import annotations

import asyncio
import time

import pytest

from conveyor_sdk._runtime.metrics import Metrics
from conveyor_sdk._runtime.observe import ObservedExecutor
from conveyor_sdk._worker.executor import CancelReason, Job, JobControl, Outcome, TaskData
from conveyor_sdk._worker.local import LocalExecutor
from conveyor_sdk._worker.registry import Registry


def _job(type_: str, *, retried: int = 0, max_retry: int = 3, waited: float = 0.0) -> Job:
    task = TaskData(
        id=f"{type_}-{retried}", queue="q", type=type_, payload=b"", content_type="", metadata={},
        retried=retried, max_retry=max_retry, enqueued_at=time.time() - waited,
    )  # fmt: skip
    return Job(task.id, "q", type_, (task,), False, None)


def _registry() -> Registry:
    reg = Registry()

    @reg.handler("sleep")
    def sleep(task: object, ctx: object) -> bytes:
        time.sleep(0.05)
        return b""

    @reg.handler("boom")
    async def boom(task: object, ctx: object) -> None:
        raise ValueError("nope")

    return reg


def test_real_local_jobs_are_counted_timed_and_their_wait_observed() -> None:
    """A sync and an async handler in a real LocalExecutor: outcomes, run time, queue wait, retry, archive."""
    metrics = Metrics(types=("sleep", "boom"))
    ex = ObservedExecutor(LocalExecutor(_registry(), threads=2), metrics)
    control = JobControl(report_progress=lambda *a: None)

    async def main() -> list[list[Outcome]]:
        await ex.start(lambda: None)
        try:
            jobs = [_job("sleep", waited=2.0), _job("boom"), _job("boom", retried=3), _job("unregistered")]
            return [await ex.run(job, control) for job in jobs]
        finally:
            await ex.close(1.0)

    asyncio.run(main())
    text = metrics.render()
    assert 'conveyor_tasks_total{type="sleep",queue="q",outcome="success"} 1' in text
    assert 'conveyor_task_duration_seconds_count{type="sleep",queue="q",outcome="success"} 1' in text
    (run_time,) = [h.total for k, h in metrics.durations.items() if k[0] == "sleep"]
    assert 0.05 <= run_time < 2.0  # the handler's time, not the 2 s the task waited before it
    wait = 'conveyor_worker_queue_wait_seconds_bucket{{queue="q",le="{}"}} {}'
    assert wait.format("1.0", 2) in text and wait.format("2.5", 3) in text  # "sleep" waited 2 s
    assert 'conveyor_worker_queue_wait_seconds_count{queue="q"} 3' in text  # the retry is not counted
    assert 'conveyor_worker_retries_total{type="boom"} 1' in text
    assert 'conveyor_worker_archived_total{type="boom"} 1' in text  # retried 3 of max 3
    assert 'conveyor_tasks_total{type="other",queue="q",outcome="retry"} 1' in text  # no handler: retried
    assert metrics.in_flight["q"] == 0


class Broken:
    """An executor that breaks the contract (run raises): cannot be made with a real one."""

    async def start(self, wakeup: object) -> None: ...

    def can_start(self, job: Job) -> bool:
        return True

    async def run(self, job: Job, control: JobControl) -> list[Outcome]:
        raise RuntimeError("broken executor")

    def cancel(self, job_id: str, reason: CancelReason) -> None: ...

    async def close(self, grace: float) -> None: ...


def test_a_raising_executor_frees_its_slot_and_counts_nothing() -> None:
    """The job is no longer in flight, no outcome or run time is invented, the error propagates."""
    metrics = Metrics()
    ex = ObservedExecutor(Broken(), metrics)
    with pytest.raises(RuntimeError, match="broken executor"):
        asyncio.run(ex.run(_job("sleep"), JobControl(report_progress=lambda *a: None)))
    assert metrics.in_flight["q"] == 0
    assert not metrics.tasks and not metrics.durations
