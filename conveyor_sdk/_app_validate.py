"""Typed enqueue validation: a payload must decode as the declared type before it is sent.

The check decodes the encoded bytes with the same codec and type a worker will
use, so "accepted by the producer" means "decodes on the worker". (Converting
the value is not enough: msgspec hands back an already-typed Struct unchecked,
so ``Order(order_id="nope")`` would pass.) The cost is one typed decode of the
payload; ``bench/codec_bench.py`` reports it.
"""

from __future__ import annotations

import re
from typing import Any

from conveyor_sdk._client.options import ValidationError
from conveyor_sdk.codecs import OCTET_STREAM, PROTOBUF, CodecError, CodecRegistry, normalize_content_type

__all__ = ["check_payload", "validates_payload"]

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
