"""Dispatch frames built in place carry exactly what message-by-message construction would."""

from __future__ import annotations

from google.protobuf import duration_pb2, timestamp_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_server_min._engine.clock import MAX_INSTANT, MIN_INSTANT, NANOS, clamp
from conveyor_server_min._engine.model import Dependency, FailurePolicy, RetryPolicy, Task
from conveyor_server_min._engine.sessions import BatchAction, DispatchAction
from conveyor_server_min._services.convert import envelope
from conveyor_server_min._services.session import server_message

_instant = st.one_of(st.none(), st.integers(MIN_INSTANT - 5, MAX_INSTANT + 5), st.integers(0, 2 * NANOS))
_span = st.one_of(st.none(), st.integers(-(10**12), 10**12))
_text = st.text(max_size=6)


def _ts(instant: int) -> timestamp_pb2.Timestamp:
    seconds, nanos = divmod(clamp(instant), NANOS)
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


def _dur(nanos: int) -> duration_pb2.Duration:
    seconds, rest = divmod(abs(nanos), NANOS)
    sign = -1 if nanos < 0 else 1
    return duration_pb2.Duration(seconds=sign * seconds, nanos=sign * rest)


def _reference(task: Task) -> tpb.TaskEnvelope:
    """The envelope built field by field from complete sub-messages (the straightforward way)."""
    opts = tpb.TaskOptions(
        max_retry=task.max_retry,
        unique_key=task.unique_key,
        priority=task.priority,
        group=task.group,
        concurrency_key=task.concurrency_key,
        depends_on=[
            tpb.TaskDependency(task_id=d.task_id, on_failure=int(d.on_failure)) for d in task.depends_on
        ],
    )
    for name in ("deadline", "process_at", "expires_at"):
        if getattr(task, name) is not None:
            getattr(opts, name).CopyFrom(_ts(getattr(task, name)))
    for name in ("timeout", "unique_ttl", "retention"):
        if getattr(task, name) is not None:
            getattr(opts, name).CopyFrom(_dur(getattr(task, name)))
    if task.retry_policy is not None:
        opts.retry_policy.strategy = task.retry_policy.strategy
        if task.retry_policy.base:
            opts.retry_policy.base.CopyFrom(_dur(task.retry_policy.base))
        if task.retry_policy.max:
            opts.retry_policy.max.CopyFrom(_dur(task.retry_policy.max))
    env = tpb.TaskEnvelope(
        id=task.id, queue=task.queue, type=task.type, payload=task.payload, content_type=task.content_type,
        metadata=task.metadata, options=opts, retried=task.retried, last_error=task.last_error,
        enqueued_at=_ts(task.enqueued_at), progress=task.progress, progress_message=task.progress_message,
    )  # fmt: skip
    if task.started_at is not None:
        env.started_at.CopyFrom(_ts(task.started_at))
    if task.completed_at is not None:
        env.completed_at.CopyFrom(_ts(task.completed_at))
    return env


_deps = st.lists(st.builds(Dependency, _text, st.sampled_from(list(FailurePolicy))), max_size=3)
_policy = st.builds(RetryPolicy, st.integers(0, 3), st.integers(0, 10**10), st.integers(0, 10**10))
_tasks = st.builds(
    Task,
    id=st.text(min_size=1, max_size=8),
    queue=_text,
    type=_text,
    enqueued_at=st.integers(MIN_INSTANT, MAX_INSTANT),
    payload=st.binary(max_size=20),
    content_type=_text,
    metadata=st.dictionaries(_text, _text, max_size=3),
    max_retry=st.integers(0, 50),
    priority=st.integers(0, 9),
    timeout=_span,
    deadline=_instant,
    process_at=_instant,
    unique_key=_text,
    unique_ttl=_span,
    retention=_span,
    group=_text,
    expires_at=_instant,
    depends_on=_deps.map(tuple),
    concurrency_key=_text,
    retry_policy=st.one_of(st.none(), _policy),
    retried=st.integers(0, 30),
    last_error=_text,
    started_at=_instant,
    completed_at=_instant,
    progress=st.integers(0, 100),
    progress_message=_text,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_tasks, st.integers(MIN_INSTANT - 5, MAX_INSTANT + 5))
def test_dispatch_matches_the_reference(task: Task, deadline: int) -> None:
    """Every field of every task (defaults, negatives, out-of-range instants, maps) encodes identically."""
    want = pb.ServerMessage()
    want.dispatch.task.CopyFrom(_reference(task))
    want.dispatch.deadline.CopyFrom(_ts(deadline))
    got = server_message(DispatchAction(task, deadline))
    assert got == want
    assert got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)
    assert envelope(task) == _reference(task)


@settings(max_examples=100, deadline=None)
@given(st.lists(_tasks, min_size=1, max_size=3), st.integers(MIN_INSTANT, MAX_INSTANT), _text)
def test_batch_dispatch_matches_the_reference(tasks: list[Task], deadline: int, group: str) -> None:
    """A BatchDispatch holds the same envelopes, deadline and group."""
    want = pb.ServerMessage()
    want.batch_dispatch.tasks.extend(_reference(t) for t in tasks)
    want.batch_dispatch.deadline.CopyFrom(_ts(deadline))
    want.batch_dispatch.group = group
    got = server_message(BatchAction(tuple(tasks), deadline, group))
    assert got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)


def test_task_with_only_defaults_still_sends_its_options() -> None:
    """Options are present on the wire even when every option is at its default (as the reference)."""
    task = Task(id="t", queue="", type="", enqueued_at=0, max_retry=0, priority=0)
    got = server_message(DispatchAction(task, 0))
    assert got.dispatch.task.HasField("options")
    assert got.dispatch.task == _reference(task)
