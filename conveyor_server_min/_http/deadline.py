"""A unary handler under the caller's deadline (``grpc-timeout`` / ``connect-timeout-ms``).

The deadline's timer is armed only if the handler has to wait: most handlers (an in-memory Enqueue)
finish in their first step, and a timeout can only fire at a suspension point, so their result is the
same without the timer.
"""

from __future__ import annotations

import asyncio
from types import CoroutineType
from typing import Any

from google.protobuf.message import Message

from conveyor_sdk._h2kernel.eager import Continuation
from conveyor_sdk.errors import DeadlineExceeded

from .inline import handoff

__all__ = ["resume_timed", "with_timeout"]


async def with_timeout(awaitable: Any, seconds: float | None) -> Message:
    """Await a handler's result (its response, or an awaitable of it) under ``seconds``, if given."""
    if isinstance(awaitable, Message):  # a handler that answers without waiting
        return awaitable
    if seconds is None:
        result: Message = await awaitable
        return result
    if not isinstance(awaitable, CoroutineType):
        return await _timed(awaitable, seconds)
    try:
        waiting_on = awaitable.send(None)
    except StopIteration as done:
        finished: Message = done.value
        return finished
    return await resume_timed(awaitable, waiting_on, seconds)


async def resume_timed(coro: CoroutineType[Any, Any, Any], waiting_on: Any, seconds: float) -> Message:
    """The rest of a handler whose first step (already taken) suspended on ``waiting_on``: from
    here on under the deadline, which needs a task for its timer."""
    resumed = Continuation.after(coro, waiting_on)
    try:
        await handoff()  # started inline by the transport (see .inline): the timer needs a task
    except BaseException:
        coro.close()
        raise
    return await _timed(resumed, seconds)


async def _timed(awaitable: Any, seconds: float) -> Message:
    try:
        async with asyncio.timeout(seconds):
            result: Message = await awaitable
    except TimeoutError:
        raise DeadlineExceeded(f"call exceeded its {seconds:g}s deadline") from None
    return result
