"""W3C trace-context propagation through task metadata, without the worker (optional OpenTelemetry).

The producer half of :mod:`conveyor_sdk.tracing`: clients inject on every enqueue, and the
worker's middleware extracts. It lives apart so that importing a client never loads the
worker's registry (CONTRIBUTING.md, "Layers"); :mod:`conveyor_sdk.tracing` re-exports it.

``opentelemetry-api`` is optional: the import is attempted once, and without it
:func:`inject` returns at once and :func:`extract` returns ``None``.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

__all__ = ["AVAILABLE", "TRACEPARENT", "extract", "inject"]

TRACEPARENT = "traceparent"

try:  # one guarded import; everything below checks AVAILABLE
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised only without the extra installed
    AVAILABLE = False
else:
    AVAILABLE = True


def inject(metadata: MutableMapping[str, str]) -> None:
    """Add the current trace context to ``metadata`` (no-op without OTel or an active span)."""
    if not AVAILABLE or TRACEPARENT in metadata:
        return
    if not _trace.get_current_span().get_span_context().is_valid:
        return
    _propagate.inject(metadata)


def extract(metadata: MutableMapping[str, str] | Any) -> Any:
    """The OpenTelemetry Context carried by ``metadata`` (``None`` without OTel)."""
    if not AVAILABLE:
        return None
    return _propagate.extract(dict(metadata))
