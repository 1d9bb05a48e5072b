"""``conveyor enqueue --app MODULE:ATTR TYPE``: enqueue as the app declares the task type.

The app is imported exactly as ``conveyor worker`` imports it. For a typed task
(``@app.task("shop:fib", queue="a", max_retry=5)``) the declared options become the defaults
(flags given on the command line still win), the payload is validated against the declared
payload type before anything is sent, and it is re-encoded with the declared codec. A plain
``Registry`` handler contributes its queue and options; it declares no payload type, so the
payload is sent as given. An unknown type is an error listing the declared ones.
"""

from __future__ import annotations

import json
from typing import Any

from conveyor_sdk._app_validate import wire_max_retry
from conveyor_sdk.app import App, TaskDefinition
from conveyor_sdk.codecs import JSON, OCTET_STREAM, PROTOBUF, CodecError, normalize_content_type

__all__ = ["apply_app"]


def _load(app_spec: str) -> Any:
    from conveyor_sdk._runtime.appload import AppLoadError, load_app

    try:
        return load_app(app_spec)
    except AppLoadError as exc:
        raise ValueError(f"--app: {exc.message}") from None


def _as_bytes(payload: Any, content_type: str | None) -> tuple[bytes, str]:
    if payload is None:
        return b"null", JSON
    if isinstance(payload, bytes | bytearray | memoryview):
        return bytes(payload), normalize_content_type(content_type or OCTET_STREAM)
    return json.dumps(payload).encode(), JSON


def _validated(definition: TaskDefinition[Any, Any], payload: Any, content_type: str | None) -> bytes:
    """Payload bytes in the declared codec, after decoding them as the declared type."""
    data, given = _as_bytes(payload, content_type)
    if definition.raw:  # the handler takes the raw TaskData: nothing to check
        return data
    declared = normalize_content_type(definition.content_type)
    name = getattr(definition.element_type, "__name__", str(definition.element_type))
    try:
        if declared == PROTOBUF and given == JSON:
            from google.protobuf import json_format

            value = json_format.Parse(data, definition.element_type())
        elif declared == OCTET_STREAM and given == JSON and payload is not None:
            raise ValueError("it takes raw bytes; pass them with --data-file")
        elif declared != given and payload is not None:
            raise ValueError(f"it is declared as {declared}, the payload given is {given}")
        else:
            value = definition.app.codecs.decode(data, declared, definition.element_type)
        return definition.encode(value)
    except (CodecError, ValueError, json_format_errors()) as exc:
        what = f"{name}, the declared payload of {definition.type!r}"
        raise ValueError(f"payload does not match {what}: {exc}") from None


def json_format_errors() -> type[Exception]:
    """protobuf's ParseError (imported lazily; protobuf ships no stubs)."""
    from google.protobuf.json_format import ParseError

    err: type[Exception] = ParseError
    return err


def apply_app(app_spec: str, type_: str, payload: Any, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(payload, options) after applying what ``app_spec`` declares for ``type_``."""
    registry = _load(app_spec)
    spec = registry.lookup(type_)
    if spec is None:
        declared = ", ".join(registry.types) or "none"
        raise ValueError(f"--app {app_spec} declares no task type {type_!r} (declared: {declared})")
    definition = registry.definitions.get(type_) if isinstance(registry, App) else None
    defaults = dict(spec.options)
    if spec.queue and "queue" not in defaults:
        defaults["queue"] = spec.queue
    if definition is None:
        return payload, wire_max_retry(type_, spec.options, {**defaults, **options})
    data = _validated(definition, payload, options.get("content_type"))
    merged = {**defaults, **options, "content_type": definition.content_type}
    return data, wire_max_retry(type_, spec.options, merged)
