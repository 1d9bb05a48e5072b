"""build_task copies every EnqueueRequest field to the Task field of the same meaning (none swapped)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import InvalidArgument
from conveyor_server_min._engine.clock import NANOS
from conveyor_server_min._engine.model import Dependency, FailurePolicy, RetryPolicy, _task_values
from conveyor_server_min._services.validate import build_task

NOW = 1_800_000_000 * NANOS


def _seconds(n: int) -> dict[str, int]:
    return {"seconds": n}


def test_every_field_lands_where_it_belongs() -> None:
    """Distinct values in every field (concurrency key variant) come out in the matching Task fields."""
    req = pb.EnqueueRequest(
        task_id="the-id",
        queue="the-queue",
        type="the-type",
        payload=b"the-payload",
        content_type="the/content-type",
        metadata={"k": "v"},
        max_retry=7,
        timeout=_seconds(5),
        deadline={"seconds": 1_900_000_000},
        process_in=_seconds(11),
        unique_key="the-unique-key",
        unique_ttl=_seconds(13),
        priority=3,
        retention=_seconds(17),
        expires_in=_seconds(19),
        depends_on=[tpb.TaskDependency(task_id="before")],
        concurrency_key="the-concurrency-key",
        retry_policy=tpb.RetryPolicy(strategy=1, base=_seconds(2), max=_seconds(3)),
    )
    task = build_task(req, now=NOW, new_id=lambda _now: "unused", default_max_retry=25)
    assert (task.id, task.queue, task.type, task.enqueued_at) == ("the-id", "the-queue", "the-type", NOW)
    assert (task.payload, task.content_type) == (b"the-payload", "the/content-type")
    assert task.metadata == {"k": "v"}
    assert (task.max_retry, task.priority) == (7, 3)
    assert task.timeout == 5 * NANOS
    assert task.deadline == 1_900_000_000 * NANOS
    assert task.process_at == NOW + 11 * NANOS
    assert (task.unique_key, task.unique_ttl) == ("the-unique-key", 13 * NANOS)
    assert task.retention == 17 * NANOS
    assert task.expires_at == NOW + 19 * NANOS
    assert task.depends_on == (Dependency("before", FailurePolicy.BLOCK),)
    assert (task.group, task.concurrency_key) == ("", "the-concurrency-key")
    assert task.retry_policy == RetryPolicy(strategy=1, base=2 * NANOS, max=3 * NANOS)


def test_group_and_defaults() -> None:
    """A grouped task keeps its group; unset fields take the server defaults (id, queue, retries...)."""
    req = pb.EnqueueRequest(type="t", group="the-group")
    task = build_task(req, now=NOW, new_id=lambda _now: "new-id", default_max_retry=25)
    assert (task.id, task.queue, task.group, task.concurrency_key) == ("new-id", "default", "the-group", "")
    assert (task.max_retry, task.priority, task.metadata, task.depends_on) == (25, 4, {}, ())
    assert (task.timeout, task.process_at, task.expires_at, task.retry_policy) == (None, None, None, None)


@settings(max_examples=200, deadline=None)
@given(
    task_id=st.text(max_size=80),
    queue=st.sampled_from(["", "q", "a.b-c_d", "-bad", "x" * 300]),
    type_=st.text(max_size=70),
    payload=st.binary(max_size=64),
    content_type=st.text(max_size=80),
)
def test_a_plain_request_builds_what_the_full_path_builds(
    task_id: str, queue: str, type_: str, payload: bytes, content_type: str
) -> None:
    """A request holding only names, payload and id (the SDK's default) takes a short path: the same
    task, or the same error, as the same request with its options spelled out at their defaults."""
    plain = pb.EnqueueRequest(
        task_id=task_id, queue=queue, type=type_, payload=payload, content_type=content_type
    )
    spelled = pb.EnqueueRequest()
    spelled.CopyFrom(plain)
    spelled.priority, spelled.max_retry = 4, 25  # set: the request leaves the short path

    def build(req: pb.EnqueueRequest) -> object:
        try:
            return _task_values(
                build_task(req, now=NOW, new_id=lambda now: f"id-{now}", default_max_retry=25)
            )
        except InvalidArgument as exc:
            return exc.message

    assert build(plain) == build(spelled)
