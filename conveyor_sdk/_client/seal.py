"""Seal a request's payload before it leaves the client (the producer half of encryption).

An :class:`~conveyor_sdk._encryption.hooks.Encryptor` may be synchronous or return
awaitables (a KMS call). The async client awaits; the blocking client runs an
awaitable to completion with ``asyncio.run`` (and refuses inside a running loop,
where that would deadlock).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Awaitable, Coroutine
from typing import Any

from conveyor_sdk._client.options import MAX_PAYLOAD, ValidationError
from conveyor_sdk._encryption.core import MARKER_KEY, MARKER_VALUE, EncryptionError
from conveyor_sdk._encryption.hooks import Encryptor
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

__all__ = ["check_reserved", "prepare_seal", "seal_request", "seal_request_sync"]


def check_reserved(req: pb.EnqueueRequest) -> None:
    """Refuse user metadata that would make a worker treat plaintext as sealed."""
    if MARKER_KEY in req.metadata:
        raise ValidationError(f"metadata key {MARKER_KEY!r} is reserved for payload encryption")


def prepare_seal(req: pb.EnqueueRequest) -> bool:
    """Validate; derive the unique key over the plaintext (as upstream); False = nothing to seal."""
    check_reserved(req)
    if not req.payload:
        return False  # an empty payload stays empty and unmarked, like upstream
    if not req.unique_key and req.HasField("unique_ttl"):
        # Every ciphertext differs, so the server could never match duplicates: derive the key
        # over the plaintext exactly as the upstream SDKs do (sha256 of type, NUL, payload).
        digest = hashlib.sha256(req.type.encode() + b"\0" + req.payload)
        req.unique_key = digest.hexdigest()
    return True


def _to_seal(req: pb.EnqueueRequest, encryptor: Encryptor | None) -> bool:
    """Validate ``req`` for either client; True when there is a payload for ``encryptor`` to seal."""
    if encryptor is None:
        check_reserved(req)
        return False
    return prepare_seal(req)


def _finish(req: pb.EnqueueRequest, sealed: Any) -> None:
    if not isinstance(sealed, bytes | bytearray | memoryview):
        raise EncryptionError(f"the encryptor returned {type(sealed).__name__}, expected bytes")
    if len(sealed) > MAX_PAYLOAD:
        raise ValidationError(f"sealed payload is {len(sealed)} bytes, the maximum is {MAX_PAYLOAD}")
    req.payload = bytes(sealed)
    req.metadata[MARKER_KEY] = MARKER_VALUE


def _seal_failed(exc: Exception) -> EncryptionError:
    if isinstance(exc, EncryptionError):
        return exc
    return EncryptionError(f"cannot encrypt the payload: {type(exc).__name__}: {exc}")


async def seal_request(req: pb.EnqueueRequest, encryptor: Encryptor | None) -> None:
    """Seal ``req.payload`` in place and set the marker (async encryptors awaited)."""
    if not _to_seal(req, encryptor):
        return
    assert encryptor is not None
    try:
        sealed: Any = encryptor.encrypt(req.payload)
        if inspect.isawaitable(sealed):
            sealed = await sealed
    except Exception as exc:
        raise _seal_failed(exc) from exc
    _finish(req, sealed)


def _run(awaitable: Awaitable[Any]) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise EncryptionError(
            "an async encryptor cannot be used from a blocking call inside a running event loop; "
            "use the async Client"
        )

    async def wait() -> Any:
        return await awaitable

    coro: Coroutine[Any, Any, Any] = wait()
    return asyncio.run(coro)


def seal_request_sync(req: pb.EnqueueRequest, encryptor: Encryptor | None) -> None:
    """:func:`seal_request` for the blocking client."""
    if not _to_seal(req, encryptor):
        return
    assert encryptor is not None
    try:
        sealed: Any = encryptor.encrypt(req.payload)
        if inspect.isawaitable(sealed):
            sealed = _run(sealed)
    except Exception as exc:
        raise _seal_failed(exc) from exc
    _finish(req, sealed)
