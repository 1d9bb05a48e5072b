"""Where encryption meets the client and the worker: seal a request, open a delivered task.

An :class:`~conveyor_sdk.encryption.Encryptor` may be synchronous or return
awaitables (a KMS call). The async client and the worker loop await; the
blocking client runs an awaitable to completion with ``asyncio.run`` (and
refuses inside a running loop, where that would deadlock).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from conveyor_sdk._client.options import MAX_PAYLOAD, ValidationError
from conveyor_sdk._encryption.core import (
    MARKER_KEY,
    MARKER_VALUE,
    DecryptionError,
    EncryptionError,
    NoEncryptionKeys,
)
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._worker.executor import Job, Outcome, OutcomeKind, TaskData

__all__ = [
    "Encryptor",
    "check_encryptor",
    "check_reserved",
    "open_task",
    "prepare_seal",
    "run_opened",
    "seal_request",
    "seal_request_sync",
    "sealed",
]


@runtime_checkable
class Encryptor(Protocol):
    """Seals and opens payload bytes; each method may return the bytes or an awaitable of them.

    ``decrypt`` must open anything a previous ``encrypt`` produced, including
    payloads sealed under keys that have since been retired.
    """

    def encrypt(self, plaintext: bytes, /) -> bytes | Awaitable[bytes]:
        """Seal ``plaintext``."""
        ...

    def decrypt(self, ciphertext: bytes, /) -> bytes | Awaitable[bytes]:
        """Open ``ciphertext``."""
        ...


def check_encryptor(value: Any) -> Encryptor | None:
    """``value`` when it is None or has ``encrypt``/``decrypt``; TypeError otherwise."""
    if value is not None and not isinstance(value, Encryptor):
        raise TypeError(f"encryption must provide encrypt() and decrypt(), got {type(value).__name__}")
    return value


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
    if encryptor is None:
        check_reserved(req)
        return
    if not prepare_seal(req):
        return
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
    if encryptor is None:
        check_reserved(req)
        return
    if not prepare_seal(req):
        return
    try:
        sealed: Any = encryptor.encrypt(req.payload)
        if inspect.isawaitable(sealed):
            sealed = _run(sealed)
    except Exception as exc:
        raise _seal_failed(exc) from exc
    _finish(req, sealed)


def _opened(task: TaskData, plaintext: Any) -> TaskData:
    if not isinstance(plaintext, bytes | bytearray | memoryview):
        raise DecryptionError(f"task {task.id}: the encryptor returned {type(plaintext).__name__}, not bytes")
    metadata = {k: v for k, v in task.metadata.items() if k != MARKER_KEY}
    return replace(task, payload=bytes(plaintext), metadata=metadata)


def _open_failed(task: TaskData, exc: Exception) -> DecryptionError:
    if isinstance(exc, DecryptionError):
        return exc.for_task(task.id)
    # A custom encryptor's own failure: retried, like every upstream SDK does.
    message = f"task {task.id}: cannot decrypt the payload: {type(exc).__name__}: {exc}"
    return DecryptionError(message, task_id=task.id)


def _unsealed(task: TaskData, encryptor: Encryptor | None) -> bool:
    if not task.metadata.get(MARKER_KEY):
        return True  # plaintext task: handed over unchanged
    if encryptor is None:
        raise NoEncryptionKeys(
            f"task {task.id}: the payload is encrypted ({MARKER_KEY}={task.metadata[MARKER_KEY]}) "
            "but this worker has no encryption keys",
            task_id=task.id,
        )
    return False


async def open_task(task: TaskData, encryptor: Encryptor | None) -> TaskData:
    """The task with its payload opened and the marker removed; :class:`DecryptionError` naming its id."""
    if _unsealed(task, encryptor):
        return task
    assert encryptor is not None
    try:
        plaintext: Any = encryptor.decrypt(task.payload)
        if inspect.isawaitable(plaintext):
            plaintext = await plaintext
    except Exception as exc:
        raise _open_failed(task, exc) from None
    return _opened(task, plaintext)


def sealed(job: Job) -> bool:
    """Whether any member of ``job`` carries a sealed payload (then :func:`run_opened` must open it)."""
    for task in job.tasks:  # noqa: SIM110 — a loop, not any(<genexpr>): every job passes here
        if task.metadata.get(MARKER_KEY):
            return True
    return False


async def run_opened(
    job: Job,
    run: Callable[[Job], Awaitable[list[Outcome]]],
    encryptor_for: Callable[[], Encryptor | None],
) -> list[Outcome]:
    """Run ``job`` with its sealed members opened first; members that cannot be opened fail alone.

    A plaintext job is handed to ``run`` unchanged (no copy). A member that cannot be opened
    gets RETRY or SKIP_RETRY by :attr:`DecryptionError.retryable` and never reaches a handler.
    """
    if not sealed(job):
        return await run(job)
    encryptor = encryptor_for()
    fixed: dict[str, Outcome] = {}
    opened = []
    for task in job.tasks:
        try:
            opened.append(await open_task(task, encryptor))
        except DecryptionError as exc:
            kind = OutcomeKind.RETRY if exc.retryable else OutcomeKind.SKIP_RETRY
            fixed[task.id] = Outcome(kind, error_msg=exc.message)
    if not opened:
        return [fixed[t.id] for t in job.tasks]
    ran = await run(replace(job, tasks=tuple(opened)))
    by_id = dict(zip((t.id for t in opened), ran, strict=True)) | fixed
    return [by_id[t.id] for t in job.tasks]
