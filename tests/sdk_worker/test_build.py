"""TaskData and Job as executors get them: the envelope -> Job conversion."""

from __future__ import annotations

import pytest

from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._protocol.inflight import delivery_from_envelopes
from conveyor_sdk._worker.convert import job_for_delivery, task_data


def _envelope(**options: object) -> tpb.TaskEnvelope:
    env = tpb.TaskEnvelope(
        id="T9", queue="mail", type="send", payload=b"x", content_type="text/plain", retried=3
    )
    env.metadata["trace"] = "abc"
    env.enqueued_at.FromSeconds(100)
    for name, value in options.items():
        if name in ("deadline", "timeout"):
            getattr(env.options, name).FromNanoseconds(int(value * 1e9))  # type: ignore[operator]
        else:
            setattr(env.options, name, value)
    return env


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"group": "g1", "max_retry": 7, "deadline": 200.5, "timeout": 30.0},
        {"timeout": 0.0},  # set but not a bound: TaskData keeps it, the Delivery's bound does not
    ],
)
def test_a_dispatch_gives_the_same_task_data_as_reading_its_envelope_afresh(
    options: dict[str, object],
) -> None:
    """The Job of a Dispatch takes fields from its Delivery: they must be what the envelope says."""
    env = _envelope(**options)
    delivery = delivery_from_envelopes((env,), batch=False, group="", now=1.0)
    job = job_for_delivery(delivery, None)
    assert job.tasks == (task_data(env),)
    assert (job.job_id, job.queue, job.type, job.batch) == ("T9", "mail", "send", False)


def test_a_batch_member_keeps_its_own_group_over_the_batch_group() -> None:
    first, second = _envelope(group="own"), _envelope()
    second.id = "T10"
    delivery = delivery_from_envelopes((first, second), batch=True, group="batch", now=1.0)
    job = job_for_delivery(delivery, None)
    assert [t.group for t in job.tasks] == ["own", "batch"]
    assert job.job_id == "batch:T9" and job.batch
