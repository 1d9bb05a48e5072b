"""Run a coroutine's first step in the caller, and let a task continue it only if it has to wait.

A unary request whose body has fully arrived (an Enqueue: HEADERS + DATA in one read) is served
by code that, with the in-memory store, never waits. Starting it as a task costs a Task object,
a ``call_soon`` and a whole event-loop turn (an ``epoll_wait``) before its first line; on an idle
server's cold CPU that is a noticeable part of the way from the producer's socket to the worker's.
:func:`start_inline` runs the first step at once, in a copy of the current context exactly as a
task would, and creates the task only when the coroutine suspends.

Code in that first step runs outside any task (``asyncio.current_task()`` is None). Code that
needs one (``asyncio.timeout``) first awaits :func:`handoff`: in a task it is a no-op, inline it
suspends once so that the continuing task resumes it.
"""

from __future__ import annotations

import asyncio
import contextvars
import types
from collections.abc import Coroutine, Generator
from typing import Any

from conveyor_sdk._h2kernel.eager import Continuation

__all__ = ["handoff", "start_inline"]


@types.coroutine
def _yield_once() -> Generator[None, None, None]:
    yield  # a bare yield: a task reschedules itself (as ``asyncio.sleep(0)``)


async def handoff() -> None:
    """Make sure the rest runs inside a task (no-op when it already does)."""
    if asyncio.current_task() is None:
        await _yield_once()


def start_inline(coro: Coroutine[Any, Any, None], name: str | None = None) -> asyncio.Task[None] | None:
    """Run ``coro`` up to its first suspension now; None if it finished, else the task continuing it.

    Exceptions other than the coroutine's completion propagate to the caller (wrap the coroutine
    when they must not).
    """
    context = contextvars.copy_context()
    try:
        pending = context.run(coro.send, None)
    except StopIteration:
        return None
    loop = asyncio.get_running_loop()
    return loop.create_task(Continuation.after(coro, pending), name=name, context=context)
