"""Coroutines whose first step runs at once, in the caller's turn, not a loop turn later.

``loop.create_task(coro)`` runs the coroutine's first step on the loop's next turn. Where that
turn is pure latency (a request read off an idle socket), two shapes run it at once:

- :func:`eager_task` creates the task first and runs the step inside it (``current_task()`` is
  the task, the step runs in the task's context copy). On Python 3.12+ that is asyncio's public
  ``eager_task_factory``; on 3.11 the kernel does it with asyncio's private ``_enter_task`` /
  ``_leave_task`` (the only private asyncio names in the tree), and on the kernel's public path
  it is plain ``create_task``. The worker starts jobs this way.
- A caller that runs the step with no task at all (the reference server's inline unary calls)
  makes a task only if the coroutine suspended: ``loop.create_task(Continuation.after(coro,
  yielded))``.

Either way the task's coroutine is a :class:`Continuation`: the task's first step receives what
the early step yielded (and waits on it as usual); every later ``send`` and ``throw`` goes to
the coroutine. A task cancelled before its own first step cancels that yielded future, as
``Task.cancel`` does for the future a task waits on, and then throws into the coroutine, so its
``finally`` blocks run inside the task.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from asyncio import tasks as _tasks
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from conveyor_sdk._h2kernel import probe

__all__ = ["Continuation", "eager_task"]

T = TypeVar("T")

# 3.12+: asyncio's public eager start. 3.11: asyncio's own switch of the current task (checked by
# .checks; where it is missing eager_task degrades to plain create_task).
_eager_factory: Callable[..., Any] | None = getattr(asyncio, "eager_task_factory", None)
_enter_task: Any = None if _eager_factory is not None else getattr(_tasks, "_enter_task", None)
_leave_task: Any = None if _eager_factory is not None else getattr(_tasks, "_leave_task", None)
PUBLIC_EAGER = _eager_factory is not None and sys.version_info >= (3, 12)

_FRESH, _YIELDED, _RETURNED, _RAISED = 0, 1, 2, 3


class Continuation(Coroutine[Any, Any, T]):
    """The coroutine protocol for ``coro``, whose first step may already have run elsewhere.

    Awaitable too (``await Continuation.after(coro, yielded)`` inside a task continues ``coro``).
    """

    __slots__ = ("_coro", "_early", "_kind")

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro
        self._kind = _FRESH
        self._early: Any = None

    @classmethod
    def after(cls, coro: Coroutine[Any, Any, T], yielded: Any) -> Continuation[T]:
        """The continuation of ``coro`` whose first step (run by the caller) yielded ``yielded``."""
        cont = cls(coro)
        cont._kind, cont._early = _YIELDED, yielded
        return cont

    def step_now(self, context: contextvars.Context) -> None:
        """Run the first step in ``context`` now; its outcome waits for the task's first step."""
        if self._kind != _FRESH:
            raise RuntimeError("the first step already ran")
        try:
            self._early = context.run(self._coro.send, None)
            self._kind = _YIELDED
        except StopIteration as stop:
            self._kind, self._early = _RETURNED, stop.value
        except BaseException as exc:
            self._kind, self._early = _RAISED, exc

    def _take_early(self) -> tuple[int, Any]:
        kind, early = self._kind, self._early
        self._kind, self._early = _FRESH, None
        return kind, early

    def send(self, value: Any) -> Any:
        if self._kind == _FRESH:
            return self._coro.send(value)
        kind, early = self._take_early()
        if kind == _YIELDED:
            return early  # what the task waits on first
        if kind == _RETURNED:
            raise StopIteration(early)
        raise early

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if self._kind != _FRESH:  # thrown before the task's first step: it can only be a cancel
            kind, early = self._take_early()
            if kind == _RETURNED:
                raise StopIteration(early)  # it had finished: nothing left to cancel
            if kind == _RAISED:
                raise early
            if isinstance(early, asyncio.Future):
                early.cancel()  # the task never waited on it, so its cancel() could not
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        self._kind, self._early = _FRESH, None
        self._coro.close()

    def __await__(self) -> Continuation[T]:
        return self

    def __iter__(self) -> Continuation[T]:
        return self

    def __next__(self) -> Any:
        return self.send(None)


def eager_task(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
    """``loop.create_task(coro, name=name)`` whose first step has run before this returns.

    Call it from a loop callback (outside any task step); inside a running task the step is
    left to the loop, as ``create_task`` would.
    """
    if PUBLIC_EAGER:
        if asyncio.current_task(loop) is not None:
            return loop.create_task(coro, name=name)
        task: asyncio.Task[T] = _eager_factory(loop, coro, name=name)  # type: ignore[misc]
        return task
    if _enter_task is None or _leave_task is None or not probe.fast:
        return loop.create_task(coro, name=name)
    context = contextvars.copy_context()
    cont = Continuation(coro)
    task = loop.create_task(cont, name=name, context=context)
    try:
        _enter_task(loop, task)
    except RuntimeError:  # another task is running
        return task
    try:
        cont.step_now(context)
    finally:
        _leave_task(loop, task)
    return task
