"""Open a delivered task's sealed payload before its handler runs (the worker half of encryption).

A member that cannot be opened fails alone, by :attr:`DecryptionError.retryable`,
and never reaches a handler.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from conveyor_sdk._encryption.core import MARKER_KEY, DecryptionError, NoEncryptionKeys
from conveyor_sdk._encryption.hooks import Encryptor
from conveyor_sdk._worker.executor import Job, Outcome, OutcomeKind, TaskData

__all__ = ["open_task", "run_opened", "sealed"]


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
