"""TaskData and Job as executors get them: the positional builders, and the envelope -> Job conversion."""

from __future__ import annotations

import dataclasses

import pytest

from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._protocol.inflight import Delivery, delivery_from_envelopes
from conveyor_sdk._worker._build import new_job, new_task_data, positional_builder
from conveyor_sdk._worker.convert import job_for_delivery, task_data
from conveyor_sdk._worker.executor import Job, TaskData

_TASK = {
    "id": "T1",
    "queue": "q",
    "type": "t",
    "payload": b"p",
    "content_type": "application/json",
    "metadata": {"k": "v"},
    "retried": 2,
    "max_retry": 5,
    "enqueued_at": 1.5,
    "timeout": 3.0,
    "task_deadline": 9.25,
    "group": "g",
    "process_at": 1.25,
}


def test_builders_match_the_keyword_constructors_field_by_field() -> None:
    """Every field lands where the class declares it (distinct values, so a swap shows)."""
    built = new_task_data(*_TASK.values())
    assert list(_TASK) == [f.name for f in dataclasses.fields(TaskData)]
    assert built == TaskData(**_TASK)  # type: ignore[arg-type]
    assert dataclasses.asdict(built) == _TASK
    job = new_job("J", "q", "t", (built,), True, 7.0)
    assert job == Job(job_id="J", queue="q", type="t", tasks=(built,), batch=True, deadline=7.0)
    assert hash(Job("J", "q", "t", (), False, None)) == hash(new_job("J", "q", "t", (), False, None))


def test_a_built_delivery_is_the_keyword_constructors_and_frozen() -> None:
    """The Delivery builder (protocol layer) fills every field in order; a missing one is refused."""
    env = tpb.TaskEnvelope(id="T1", queue="q", type="t")
    built = delivery_from_envelopes((env,), batch=False, group="g", now=5.0)
    assert built == Delivery(
        job_id="T1", queue="q", type="t", tasks=(env,), batch=False, group="g",
        received_at=5.0, task_deadline=None, timeout=None,
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.job_id = "X"  # type: ignore[misc]
    with pytest.raises(TypeError):
        new_job("J", "q", "t", (), False)  # a missing field, as with the constructor


def test_built_instances_stay_frozen() -> None:
    built = new_job("J", "q", "t", (), False, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.deadline = 1.0  # type: ignore[misc]
    assert dataclasses.replace(built, deadline=2.0).deadline == 2.0


def test_a_class_the_builder_cannot_serve_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class Hidden:
        a: int
        b: int = dataclasses.field(default=0, init=False)

    for cls, why in ((NoSlots, "not a slots dataclass"), (PostInit, "__post_init__"), (Hidden, "outside")):
        with pytest.raises(TypeError, match=why):
            positional_builder(cls)


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
