"""W3C traceparent injection on enqueue and the consumer-span middleware (opentelemetry-api only)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from conveyor_sdk import tracing
from conveyor_sdk._client.requests import enqueue as build_enqueue
from conveyor_sdk.app import App
from conveyor_sdk.codecs import CodecRegistry
from conveyor_sdk.worker import Job, OutcomeKind, TaskContext, TaskData, invoke

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7
PARENT = SpanContext(trace_id=TRACE_ID, span_id=SPAN_ID, is_remote=False, trace_flags=TraceFlags(1))
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_inject_writes_traceparent_from_the_current_span() -> None:
    """Inside an active span, enqueue requests carry its W3C traceparent."""
    assert tracing.AVAILABLE
    with trace.use_span(NonRecordingSpan(PARENT)):
        req = build_enqueue("t", None, {}, CodecRegistry.default(), trace=True)
    assert req.metadata["traceparent"] == TRACEPARENT


def test_no_span_no_metadata_and_explicit_value_wins() -> None:
    """Without a span nothing is added; a caller's traceparent is never overwritten; trace=False opts out."""
    codecs = CodecRegistry.default()
    assert "traceparent" not in build_enqueue("t", None, {}, codecs, trace=True).metadata
    mine = {"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}
    with trace.use_span(NonRecordingSpan(PARENT)):
        kept = build_enqueue("t", None, {"metadata": mine}, codecs, trace=True)
        off = build_enqueue("t", None, {}, codecs, trace=False)
    assert kept.metadata["traceparent"] == mine["traceparent"]
    assert "traceparent" not in off.metadata


def _delivery(metadata: dict[str, str], id: str = "t1") -> TaskData:
    return TaskData(id=id, queue="emails", type="traced", payload=b"1", content_type="application/json",
                    metadata=metadata, retried=0, max_retry=1)  # fmt: skip


def test_middleware_runs_the_handler_in_the_producer_trace() -> None:
    """The handler's current span context continues the producer's trace id; context is restored after."""
    app = App()  # tracing middleware added automatically
    seen: list[SpanContext] = []

    @app.task("traced")
    def handler(payload: int, ctx: TaskContext) -> None:
        seen.append(trace.get_current_span().get_span_context())

    job = Job(job_id="t1", queue="emails", type="traced", tasks=(_delivery({"traceparent": TRACEPARENT}),),
              batch=False, deadline=None)  # fmt: skip
    assert [o.kind for o in invoke(app, job)] == [OutcomeKind.SUCCESS]
    assert seen[0].trace_id == TRACE_ID and seen[0].span_id == SPAN_ID
    assert not trace.get_current_span().get_span_context().is_valid


def test_middleware_survives_failures_and_missing_context() -> None:
    """A raising handler still gets RETRY, and a task without metadata runs untraced."""
    app = App()
    flags: list[bool] = []

    @app.task("traced")
    def handler(payload: int, ctx: TaskContext) -> None:
        flags.append(trace.get_current_span().get_span_context().is_valid)
        raise RuntimeError("boom")

    job = Job(job_id="t1", queue="emails", type="traced", tasks=(_delivery({}),), batch=False, deadline=None)
    outcomes = invoke(app, job)
    assert outcomes[0].kind is OutcomeKind.RETRY and "boom" in outcomes[0].error_msg
    assert flags == [False]
    assert any(isinstance(m, tracing.TracingMiddleware) for m in app.middlewares)
    assert not any(isinstance(m, tracing.TracingMiddleware) for m in App(tracing=False).middlewares)
