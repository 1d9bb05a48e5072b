"""Client-side validation and EnqueueRequest building for every §6.1 option."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from conveyor_sdk._client.options import MAX_PAYLOAD, TaskSpec, ValidationError, build_request
from conveyor_sdk._client.requests import enqueue_items, list_tasks, reschedule
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.codecs import CodecRegistry
from conveyor_sdk.errors import ConveyorError, InvalidArgument
from conveyor_sdk.types import Dependency, OnFailure, RetryPolicy, RetryStrategy, TaskState

CODECS = CodecRegistry.default()
WHEN = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def build(type: str = "t", payload: object = None, **options: object):
    return build_request(type, payload, options, CODECS)


def test_every_option_lands_in_the_request() -> None:
    """Each keyword option is copied into its EnqueueRequest field."""
    req = build(
        "email:welcome",
        {"user_id": 42},
        task_id="id-1",
        queue="emails",
        metadata={"k": "v"},
        max_retry=5,
        timeout=timedelta(seconds=1.5),
        deadline=WHEN,
        process_in=60,
        unique_key="u",
        unique_ttl=30.0,
        priority=9,
        retention=3600,
        expires_at=WHEN,
        depends_on=["a", Dependency("b", OnFailure.CASCADE_CANCEL)],
        concurrency_key="ck",
        retry_policy=RetryPolicy(strategy=RetryStrategy.LINEAR, base=2, max=timedelta(minutes=1)),
    )
    assert req.type == "email:welcome" and req.task_id == "id-1" and req.queue == "emails"
    assert req.payload == b'{"user_id":42}' and req.content_type == "application/json"
    assert dict(req.metadata) == {"k": "v"}
    assert req.max_retry == 5 and req.priority == 9
    assert req.timeout.ToTimedelta() == timedelta(seconds=1.5)
    assert req.deadline.ToDatetime(tzinfo=UTC) == WHEN
    assert req.process_in.ToTimedelta() == timedelta(seconds=60) and not req.HasField("process_at")
    assert req.unique_key == "u" and req.unique_ttl.seconds == 30
    assert req.retention.seconds == 3600 and req.expires_at.ToDatetime(tzinfo=UTC) == WHEN
    assert [(d.task_id, d.on_failure) for d in req.depends_on] == [
        ("a", tpb.DEPENDENCY_FAILURE_POLICY_BLOCK),
        ("b", tpb.DEPENDENCY_FAILURE_POLICY_CASCADE_CANCEL),
    ]
    assert req.concurrency_key == "ck"
    assert req.retry_policy.strategy == tpb.RETRY_STRATEGY_LINEAR
    assert req.retry_policy.base.seconds == 2 and req.retry_policy.max.seconds == 60


def test_unset_options_stay_unset() -> None:
    """A bare enqueue sends only the type: every message field is absent, scalars zero."""
    req = build("t")
    for name in ("timeout", "deadline", "process_at", "process_in", "unique_ttl", "retention", "expires_at"):
        assert not req.HasField(name), name
    assert not req.HasField("retry_policy")
    assert (req.queue, req.task_id, req.max_retry, req.priority, req.payload, req.content_type) == (
        "",
        "",
        0,
        0,
        b"",
        "",
    )


def test_group_and_process_at_with_other_timezone() -> None:
    """A non-UTC aware datetime is converted to the same instant."""
    plus2 = timezone(timedelta(hours=2))
    req = build(process_at=datetime(2030, 1, 1, 12, tzinfo=plus2))
    assert req.process_at.ToDatetime(tzinfo=UTC) == datetime(2030, 1, 1, 10, tzinfo=UTC)
    assert build(group="g").group == "g"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"process_at": WHEN, "process_in": 5}, "process_at and process_in are mutually exclusive"),
        ({"expires_at": WHEN, "expires_in": 5}, "expires_at and expires_in are mutually exclusive"),
        ({"group": "g", "process_in": 5}, "group and process_in are mutually exclusive"),
        ({"group": "g", "process_at": WHEN}, "group and process_at are mutually exclusive"),
        ({"group": "g", "concurrency_key": "c"}, "group and concurrency_key are mutually exclusive"),
        ({"priority": 10}, "priority must be in 0..9"),
        ({"priority": -1}, "priority must be in 0..9"),
        ({"priority": True}, "priority must be an int"),
        ({"max_retry": -1}, "max_retry must not be negative"),
        ({"max_retry": 1.5}, "max_retry must be an int"),
        ({"queue": "-bad"}, "invalid queue name"),
        ({"queue": "has space"}, "invalid queue name"),
        ({"queue": ""}, "queue must not be empty"),
        ({"task_id": ""}, "task_id must not be empty"),
        ({"deadline": datetime(2030, 1, 1)}, "naive datetime"),
        ({"process_at": "tomorrow"}, "process_at must be a datetime"),
        ({"timeout": -1}, "timeout must not be negative"),
        ({"timeout": "2s"}, "timeout must be seconds"),
        ({"depends_on": [""]}, "a dependency must name a task id"),
        ({"depends_on": "abc"}, "depends_on must be a list"),
        ({"depends_on": [str(i) for i in range(1001)]}, "at most 1000"),
        ({"metadata": {"k": 1}}, "metadata keys and values must be str"),
        ({"retry_policy": {"strategy": 1}}, "retry_policy must be a RetryPolicy"),
        ({"retry_policy": RetryPolicy(base=-1)}, "retry_policy.base must not be negative"),
    ],
)
def test_invalid_options_raise_before_the_network(options: dict[str, object], message: str) -> None:
    """Every server-side invalid_argument rule is caught locally with a clear message."""
    with pytest.raises(ValidationError, match=message) as info:
        build("t", None, **options)
    assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidArgument)
    assert isinstance(info.value, ConveyorError)


def test_type_and_payload_limits() -> None:
    """Empty type and payloads over 1 MiB are refused; exactly 1 MiB passes."""
    with pytest.raises(ValidationError, match="task type is required"):
        build("")
    assert len(build("t", b"x" * MAX_PAYLOAD).payload) == MAX_PAYLOAD
    with pytest.raises(ValidationError, match="payload is 1048577 bytes"):
        build("t", b"x" * (MAX_PAYLOAD + 1))


def test_unknown_option_is_a_type_error() -> None:
    """A misspelt option is never silently dropped."""
    with pytest.raises(TypeError, match="unknown enqueue option"):
        build("t", prioirty=3)
    with pytest.raises(TypeError, match="unknown enqueue option"):
        TaskSpec("t", None, **{"bogus": 1})  # type: ignore[arg-type]


def test_batch_items_are_checked_with_their_index() -> None:
    """Batch/tx validation names the failing item and enforces 1..1000 items."""
    with pytest.raises(ValidationError, match="enqueue_batch item 1: priority"):
        enqueue_items([TaskSpec("a"), TaskSpec("b", priority=12)], CODECS, trace=False, what="enqueue_batch")
    with pytest.raises(ValidationError, match="at least one task"):
        enqueue_items([], CODECS, trace=False, what="enqueue_tx")
    with pytest.raises(ValidationError, match="1001 tasks"):
        enqueue_items([TaskSpec("a")] * 1001, CODECS, trace=False, what="enqueue_tx")
    assert len(enqueue_items([TaskSpec("a")] * 1000, CODECS, trace=False, what="enqueue_tx")) == 1000


def test_admin_request_validation() -> None:
    """ListTasks limits/states and Reschedule's exactly-one rule are checked locally."""
    assert list_tasks("q", "pending", 10, "").state == TaskState.PENDING
    assert list_tasks(None, TaskState.ARCHIVED, 0, "tok").page_token == "tok"
    with pytest.raises(ValueError, match="unknown task state"):
        list_tasks(None, "sleeping", 0, "")
    with pytest.raises(ValidationError, match="limit"):
        list_tasks(None, None, 1001, "")
    with pytest.raises(ValidationError, match="exactly one"):
        reschedule("id", None, None)
    with pytest.raises(ValidationError, match="exactly one"):
        reschedule("id", WHEN, 5)
    assert reschedule("id", None, 5).process_in.seconds == 5
