"""The positional builders of TaskData and Job: the same values as the classes' own constructors."""

from __future__ import annotations

import dataclasses

import pytest

from conveyor_sdk._worker._build import new_job, new_task_data, positional_builder
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
