"""Typed task definitions: payload types from annotations, defaults, and worker-side decoding."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import msgspec
import pytest

from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.app import App, TaskDefinition
from conveyor_sdk.codecs import JSON, OCTET_STREAM, PROTOBUF
from conveyor_sdk.worker import Job, OutcomeKind, TaskContext, TaskData, invoke, invoke_async


class Welcome(msgspec.Struct):
    user_id: int


@dataclasses.dataclass
class Report:
    name: str


def _task(type_: str, payload: bytes, content_type: str = JSON, id: str = "t1") -> TaskData:
    return TaskData(id=id, queue="q", type=type_, payload=payload, content_type=content_type,
                    metadata={}, retried=0, max_retry=3)  # fmt: skip


def _job(*tasks: TaskData, batch: bool = False) -> Job:
    return Job(job_id=tasks[0].id, queue="q", type=tasks[0].type, tasks=tasks, batch=batch, deadline=None)


def test_decorator_registers_a_typed_definition() -> None:
    """@app.task returns a TaskDefinition registered in the App (a worker Registry)."""
    app = App(tracing=False)

    @app.task("email:welcome", queue="emails", max_retry=5)
    async def send_welcome(payload: Welcome, ctx: TaskContext) -> None:
        return None

    assert isinstance(send_welcome, TaskDefinition)
    spec = app.lookup("email:welcome")
    assert spec is not None and spec.is_async and spec.queue == "emails" and spec.decode is not None
    assert send_welcome.payload_type is Welcome and send_welcome.content_type == JSON
    assert app["email:welcome"] is send_welcome and "email:welcome" in app.types


def test_defaults_are_overridable_per_call() -> None:
    """Decorator options are defaults; per-call options win; content_type is the definition's."""
    app = App(tracing=False)

    @app.task("report", queue="reports", priority=3, max_retry=2)
    def build(payload: Report, ctx: TaskContext) -> None:
        return None

    merged = build.options(priority=8, process_in=5)
    expected = {"queue": "reports", "priority": 8, "max_retry": 2, "process_in": 5, "content_type": JSON}
    assert merged == expected
    spec = build.spec(Report(name="q3"), task_id="r1")
    assert spec.payload == b'{"name":"q3"}' and spec.options["task_id"] == "r1"
    with pytest.raises(TypeError, match="unknown enqueue option"):
        build.options(bogus=1)  # type: ignore[call-arg]


def test_content_type_follows_the_annotation() -> None:
    """bytes -> octet-stream, protobuf class -> x-protobuf, anything else -> JSON."""
    app = App(tracing=False)

    @app.task("raw")
    def raw(payload: bytes, ctx: TaskContext) -> None: ...

    @app.task("proto")
    def proto(payload: tpb.TaskDependency, ctx: TaskContext) -> None: ...

    @app.task("plain")
    def plain(payload: dict[str, int], ctx: TaskContext) -> None: ...

    @app.task("untyped")
    def untyped(payload, ctx): ...  # type: ignore[no-untyped-def]

    assert (raw.content_type, proto.content_type, plain.content_type) == (OCTET_STREAM, PROTOBUF, JSON)
    assert untyped.payload_type is Any and untyped.content_type == JSON
    dep = tpb.TaskDependency(task_id="x")
    assert proto.decode(_task("proto", proto.encode(dep), PROTOBUF)) == dep
    assert raw.decode(_task("raw", b"\x01", OCTET_STREAM)) == b"\x01"


def test_worker_decodes_into_the_payload_type() -> None:
    """The handler receives the decoded Struct and returns SUCCESS."""
    app = App(tracing=False)
    seen: list[Welcome] = []

    @app.task("email:welcome")
    def send(payload: Welcome, ctx: TaskContext) -> None:
        seen.append(payload)

    outcomes = invoke(app, _job(_task("email:welcome", send.encode(Welcome(user_id=42)))))
    assert [o.kind for o in outcomes] == [OutcomeKind.SUCCESS]
    assert seen == [Welcome(user_id=42)]


def test_undecodable_payload_is_skip_retry() -> None:
    """A payload of the wrong shape or an unknown content_type ends as SKIP_RETRY with a clear message."""
    app = App(tracing=False)

    @app.task("email:welcome")
    async def send(payload: Welcome, ctx: TaskContext) -> None:
        raise AssertionError("must not run")

    bad_shape = asyncio.run(invoke_async(app, _job(_task("email:welcome", b'{"user_id":"x"}'))))
    assert bad_shape[0].kind is OutcomeKind.SKIP_RETRY
    assert "Welcome" in bad_shape[0].error_msg and "user_id" in bad_shape[0].error_msg
    unknown = asyncio.run(invoke_async(app, _job(_task("email:welcome", b"a,b", "text/csv"))))
    assert unknown[0].kind is OutcomeKind.SKIP_RETRY
    assert "no codec for content_type 'text/csv'" in unknown[0].error_msg


def test_batch_task_decodes_each_member() -> None:
    """@app.batch_task takes list[T]; members decode individually and are passed in order."""
    app = App(tracing=False)
    got: list[list[Welcome]] = []

    @app.batch_task("email:digest")
    def digest(payloads: list[Welcome], ctx: TaskContext) -> None:
        got.append(payloads)

    assert app.batch_types == ("email:digest",) and digest.content_type == "application/json"

    @app.batch_task("blobs")
    def blobs(payloads: list[bytes], ctx: TaskContext) -> None: ...

    assert blobs.content_type == OCTET_STREAM and blobs.element_type is bytes
    members = [_task("email:digest", digest.encode(Welcome(user_id=i)), id=f"m{i}") for i in range(3)]
    outcomes = invoke(app, _job(*members, batch=True))
    assert [o.kind for o in outcomes] == [OutcomeKind.SUCCESS] * 3
    assert got == [[Welcome(user_id=0), Welcome(user_id=1), Welcome(user_id=2)]]
    with pytest.raises(TypeError, match=r"list\[T\]"):

        @app.batch_task("bad")
        def bad(payloads: Welcome, ctx: TaskContext) -> None: ...


def test_raw_taskdata_annotation_and_explicit_payload_type() -> None:
    """Annotating TaskData passes the raw delivery; payload_type= overrides the annotation."""
    app = App(tracing=False)

    @app.task("raw")
    def raw(task: TaskData, ctx: TaskContext) -> None: ...

    @app.task("explicit", payload_type=Report)
    def explicit(payload, ctx): ...  # type: ignore[no-untyped-def]

    delivery = _task("raw", b"anything", "weird/type")
    assert raw.decode(delivery) is delivery
    assert explicit.decode(_task("explicit", b'{"name":"n"}')) == Report(name="n")


def test_direct_call_runs_the_handler() -> None:
    """Calling the definition calls the handler (handy in unit tests)."""
    app = App(tracing=False)

    @app.task("double")
    def double(payload: int, ctx: Any) -> int:
        return payload * 2

    assert double(21, None) == 42
    assert "double" in repr(double)
