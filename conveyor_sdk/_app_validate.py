"""Typed enqueue validation: a payload must decode as the declared type before it is sent.

The check decodes the encoded bytes with the same codec and type a worker will
use, so "accepted by the producer" means "decodes on the worker". (Converting
the value is not enough: msgspec hands back an already-typed Struct unchecked,
so ``Order(order_id="nope")`` would pass.) The cost is one typed decode of the
payload; ``bench/codec_bench.py`` reports it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from conveyor_sdk._client.options import ValidationError
from conveyor_sdk.codecs import OCTET_STREAM, PROTOBUF, CodecError, CodecRegistry, normalize_content_type

__all__ = ["check_payload", "validates_payload", "wire_max_retry"]

_PATH = re.compile(r" - at `(\$[^`]*)`$")


def validates_payload(element_type: Any, content_type: str) -> bool:
    """True when enqueue should check payloads (a concrete type under a structured codec)."""
    if element_type is Any or element_type is object:
        return False
    return normalize_content_type(content_type) not in (OCTET_STREAM, PROTOBUF)


def _type_name(type_: Any) -> str:
    return type_.__name__ if isinstance(type_, type) else repr(type_)


def check_payload(
    codecs: CodecRegistry, task_type: str, content_type: str, element_type: Any, data: bytes
) -> None:
    """Decode ``data`` as a task's payload type; :class:`ValidationError` naming the bad field."""
    try:
        codecs.decode(data, content_type, element_type)
    except CodecError as exc:
        cause = exc.__cause__
        detail = str(cause) if cause is not None else exc.message
        match = _PATH.search(detail)
        path = match.group(1) if match else "$"
        reason = detail[: match.start()] if match else detail
        name = _type_name(element_type)
        raise ValidationError(
            f"payload for task {task_type!r} does not match {name} at {path}: {reason}",
            details={"path": path},
        ) from exc


def wire_max_retry(task_type: str, declared: Mapping[str, Any], merged: dict[str, Any]) -> dict[str, Any]:
    """``merged`` enqueue options with a never-retry type's ``max_retry`` as the wire can say it.

    On the wire ``max_retry=0`` means "the server default" (25), so a type declared
    ``max_retry=0`` is sent with 1, the smallest budget there is, and its workers report
    every failed attempt as final (SKIP_RETRY). The 1 only matters when no Result comes
    back at all (the worker died mid-task): the server then redelivers once, not 25 times.
    A different per-call ``max_retry`` for such a type is refused: its workers would ignore it.
    """
    if declared.get("max_retry") != 0:
        return merged
    asked = merged.get("max_retry")
    if asked != 0:
        raise ValidationError(
            f"task {task_type!r} is declared never-retry (max_retry=0 in its @app.task); its workers "
            f"end every failed attempt, so max_retry={asked!r} cannot apply: declare a budget instead"
        )
    return {**merged, "max_retry": 1}
