"""W3C trace-context propagation through task metadata (optional OpenTelemetry).

Producer side: :func:`inject` writes ``traceparent`` (and ``tracestate`` /
``baggage`` when present) into a task's metadata from the *current* OpenTelemetry
context, through the globally configured propagator (W3C trace-context +
baggage by default). Clients call it on every enqueue; a caller-provided
``traceparent`` is never overwritten, and nothing is written when no span is
active.

Worker side: :class:`TracingMiddleware` extracts that context and runs the
handler inside a ``CONSUMER`` span named ``process <queue>`` (messaging
semantic conventions), recording the exception on failure. For a batch the
first member's context is the parent and every member's context becomes a link.

``opentelemetry-api`` is optional: the import is attempted once, and without it
:func:`inject` returns at once and the middleware is a no-op.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from conveyor_sdk._tracecontext import AVAILABLE, TRACEPARENT, extract, inject
from conveyor_sdk._worker.registry import Middleware

if TYPE_CHECKING:
    from conveyor_sdk._worker.context import TaskContext

if AVAILABLE:
    from opentelemetry import context as _otel_context
    from opentelemetry import trace as _trace

__all__ = ["AVAILABLE", "TRACEPARENT", "TracingMiddleware", "extract", "inject"]

log = logging.getLogger("conveyor.tracing")

_TRACER_NAME = "conveyor_sdk"
_EXTRAS_KEY = "conveyor.tracing"


class TracingMiddleware(Middleware):
    """Worker middleware: a consumer span around each handler execution, parented by the producer."""

    def __init__(self, tracer_provider: Any = None) -> None:
        self._tracer = _trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider) if AVAILABLE else None

    def before_task(self, ctx: TaskContext) -> None:
        """Start the span and make it current for the handler."""
        if self._tracer is None:
            return
        tasks = ctx.tasks
        parent = extract(tasks[0].metadata)
        links = []
        if len(tasks) > 1:
            for task in tasks:
                span_ctx = _trace.get_current_span(extract(task.metadata)).get_span_context()
                if span_ctx.is_valid:
                    links.append(_trace.Link(span_ctx))
        first = tasks[0]
        span = self._tracer.start_span(
            f"process {first.queue}",
            context=parent,
            kind=_trace.SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": "conveyor",
                "messaging.operation.name": "process",
                "messaging.destination.name": first.queue,
                "messaging.message.id": first.id,
                "messaging.batch.message_count": len(tasks),
                "conveyor.task.type": first.type,
                "conveyor.task.retried": first.retried,
            },
        )
        token = _otel_context.attach(_trace.set_span_in_context(span, parent))
        ctx.extras[_EXTRAS_KEY] = (span, token)

    def after_task(self, ctx: TaskContext, result: Any, error: BaseException | None) -> None:
        """End the span (recording ``error``) and restore the previous context."""
        state = ctx.extras.pop(_EXTRAS_KEY, None)
        if state is None:
            return
        span, token = state
        if error is not None:
            span.record_exception(error)
            span.set_status(_trace.Status(_trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()
        try:
            _otel_context.detach(token)
        except ValueError:  # detached in another context (thread hop); the span is already ended
            log.debug("trace context token belonged to another context")
