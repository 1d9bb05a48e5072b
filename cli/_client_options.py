"""Turn CLI flags and JSONL task lines into typed enqueue options (pure; ValueError on mistakes).

A JSONL line is one object: ``{"type": "email:welcome", "payload": {...}, ...options}``.
``payload`` is any JSON value (encoded as application/json) or use
``payload_b64`` (base64 bytes, sent with ``content_type`` or octet-stream).
Durations are seconds or strings like ``"90s"``/``"1m"``; timestamps are ISO 8601
with a timezone (``2030-01-01T10:00:00Z``); ``depends_on`` is a list of ids,
``"id:cascade_cancel"`` strings, or ``{"task_id": ..., "on_failure": ...}``;
``retry_policy`` is ``{"strategy": "fixed", "base": "1s", "max": "1m"}``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from conveyor_sdk.client import EnqueueOptions, TaskSpec
from conveyor_sdk.durations import parse_duration
from conveyor_sdk.types import Dependency, OnFailure, RetryPolicy, RetryStrategy

__all__ = ["parse_dependency", "parse_line", "parse_metadata", "parse_options", "parse_timestamp"]

_DURATIONS = {"timeout", "process_in", "unique_ttl", "retention", "expires_in"}
_TIMESTAMPS = {"deadline", "process_at", "expires_at"}
_INTS = {"max_retry", "priority"}
_STRINGS = {"task_id", "queue", "content_type", "unique_key", "group", "concurrency_key"}
_KNOWN = _DURATIONS | _TIMESTAMPS | _INTS | _STRINGS | {"metadata", "depends_on", "retry_policy"}


def parse_timestamp(name: str, text: str) -> datetime:
    """ISO 8601 with a timezone; a naive time is refused rather than guessed."""
    try:
        value = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {text!r} is not an ISO 8601 time (e.g. 2030-01-01T10:00:00Z)") from None
    if value.tzinfo is None:
        raise ValueError(f"{name}: {text!r} has no timezone; add one, e.g. {text}Z or {text}+02:00")
    return value


def parse_dependency(item: Any) -> Dependency:
    """``"id"``, ``"id:continue"`` or ``{"task_id": "id", "on_failure": "cascade_cancel"}``."""
    if isinstance(item, Mapping):
        task_id, policy = item.get("task_id", ""), str(item.get("on_failure", "block"))
    elif isinstance(item, str):
        task_id, _, policy = item.partition(":")
        policy = policy or "block"
    else:
        raise ValueError(f"depends_on: cannot use {item!r}")
    try:
        on_failure = OnFailure[policy.strip().upper()]
    except KeyError:
        raise ValueError(
            f"depends_on: unknown on_failure {policy!r}; use block, cascade_cancel or continue"
        ) from None
    return Dependency(str(task_id), on_failure)


def parse_metadata(pairs: list[str]) -> dict[str, str]:
    """``key=value`` strings."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"metadata {pair!r}: use key=value")
        out[key] = value
    return out


def _retry_policy(value: Any) -> RetryPolicy:
    if not isinstance(value, Mapping):
        raise ValueError("retry_policy must be an object like {'strategy': 'fixed', 'base': '1s'}")
    strategy = str(value.get("strategy", "default")).upper()
    if strategy not in RetryStrategy.__members__:
        raise ValueError(f"retry_policy.strategy {value.get('strategy')!r}: use exponential, linear or fixed")
    base, cap = value.get("base"), value.get("max")
    return RetryPolicy(
        strategy=RetryStrategy[strategy],
        base=None if base is None else parse_duration(base),
        max=None if cap is None else parse_duration(cap),
    )


def _scalar(name: str, value: Any) -> Any:
    if name in _DURATIONS:
        return parse_duration(value)
    if name in _TIMESTAMPS:
        return parse_timestamp(name, value) if isinstance(value, str) else value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return value


def _convert(name: str, value: Any) -> Any:
    if name in _DURATIONS | _TIMESTAMPS | _INTS:
        return _scalar(name, value)
    if name == "depends_on":
        if not isinstance(value, list):
            raise ValueError("depends_on must be a list")
        return [parse_dependency(item) for item in value]
    if name == "retry_policy":
        return _retry_policy(value)
    if name == "metadata":
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise ValueError("metadata must be an object of strings")
        return dict(value)
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def parse_options(raw: Mapping[str, Any]) -> EnqueueOptions:
    """Typed options from loosely typed values (None = not given)."""
    unknown = sorted(set(raw) - _KNOWN)
    if unknown:
        raise ValueError(f"unknown option(s): {', '.join(unknown)}")
    options: dict[str, Any] = {
        name: _convert(name, value) for name, value in raw.items() if value is not None
    }
    return options  # type: ignore[return-value]  # keys checked against _KNOWN above


def parse_line(line: str, number: int) -> TaskSpec:
    """One JSONL line -> TaskSpec (errors name the line number)."""
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("expected a JSON object")
        obj = dict(obj)
        type_ = obj.pop("type", None)
        if not isinstance(type_, str) or not type_:
            raise ValueError('"type" (a non-empty string) is required')
        payload = _payload(obj)
        return TaskSpec(type_, payload, **parse_options(obj))
    except ValueError as exc:
        raise ValueError(f"line {number}: {exc}") from None


def _payload(obj: dict[str, Any]) -> Any:
    if "payload_b64" in obj:
        if "payload" in obj:
            raise ValueError("use payload or payload_b64, not both")
        try:
            return base64.b64decode(obj.pop("payload_b64"), validate=True)
        except (binascii.Error, TypeError):
            raise ValueError("payload_b64 is not valid base64") from None
    return obj.pop("payload", None)
