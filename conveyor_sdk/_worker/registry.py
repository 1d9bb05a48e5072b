"""Handler registry and middleware hooks.

A :class:`Registry` maps task types to :class:`HandlerSpec` records. Handlers are sync
or async callables ``fn(task, ctx)`` (singles) or ``fn(tasks, ctx)`` (batches), checked
at registration (a handler that cannot take two positional arguments is a TypeError
naming it and the expected shape); ``task``
is the decoded payload when the spec has a ``decode`` function, else the
:class:`~conveyor_sdk._worker.executor.TaskData` itself.

Middleware (dramatiq-style documented hooks): subclass :class:`Middleware` and override
any hook. Hooks are plain synchronous methods that run in the handler's own execution
context (the worker thread for sync handlers, the handler's asyncio task for async
ones), so context variables set in ``before_task`` are visible to the handler and can
be reset in ``after_task``. ``before_task`` hooks run in registration order,
``after_task`` hooks in reverse order, and ``after_task`` runs for every middleware
whose ``before_task`` ran, even when the handler raised. An exception raised by a hook
is treated like one raised by the handler.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from conveyor_sdk._worker.executor import TaskData

if TYPE_CHECKING:
    from conveyor_sdk._worker.context import TaskContext

__all__ = ["HandlerSpec", "Middleware", "Registry", "check_handler_signature"]

F = TypeVar("F", bound=Callable[..., Any])
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """One registered handler.

    Attributes:
        type: task type routed to this handler.
        fn: ``fn(task, ctx)`` or, for batches, ``fn(tasks, ctx)``; sync or async.
        batch: True for a batch handler (advertised in ``Hello.batch_types``).
        is_async: True when ``fn`` is a coroutine function.
        decode: turns a TaskData into the handler's argument; None passes the TaskData.
            A failure becomes SKIP_RETRY ("cannot decode payload of task <id> (<ct>): <err>").
        queue: optional hint of the queue this type lives on (informational).
        options: free-form extras for higher layers (e.g. typed task defaults).
    """

    type: str
    fn: Callable[..., Any]
    batch: bool = False
    is_async: bool = False
    decode: Callable[[TaskData], Any] | None = None
    queue: str | None = None
    options: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


class Middleware:
    """Base class with no-op hooks; override the ones you need. See the module docstring."""

    def before_task(self, ctx: TaskContext) -> None:
        """Called before the handler (after payload decoding)."""

    def after_task(self, ctx: TaskContext, result: Any, error: BaseException | None) -> None:
        """Called after the handler with its return value or the exception it raised."""


def _is_async(fn: Callable[..., Any]) -> bool:
    target = getattr(fn, "__call__", None) if not inspect.isroutine(fn) else fn  # noqa: B004
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(target)


def check_handler_signature(fn: Callable[..., Any], type_: str, *, batch: bool) -> None:
    """TypeError unless ``fn`` can be called as ``fn(task, ctx)`` (what every executor does).

    Checked at registration, so a wrong signature fails when the module is imported
    instead of burning a task's retries at run time. Callables whose signature cannot
    be introspected (some builtins) are accepted as they are.
    """
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(None, None)
    except TypeError as exc:
        name = getattr(fn, "__qualname__", None) or repr(fn)
        shape = "(payloads: list[T], ctx)" if batch else "(payload, ctx)"
        raise TypeError(
            f"handler {name}{sig} for task type {type_!r} cannot be called as {name}{shape}: {exc}. "
            f"Expected `def {name}{shape}` or `async def {name}{shape}`"
            + (" (a batch handler gets the list of payloads)" if batch else "")
        ) from None


class Registry:
    """Task type -> handler map plus the middleware stack."""

    def __init__(self) -> None:
        self._specs: dict[str, HandlerSpec] = {}
        # ``lookup(type)``: the spec for ``type`` or None. The dict's own ``get``, not a method
        # around it: the driver and the executors look a type up for every job they take.
        self.lookup: Callable[[str], HandlerSpec | None] = self._specs.get
        self._middleware: list[Middleware] = []
        self._middlewares: tuple[Middleware, ...] = ()  # what ``middlewares`` returns (read per job)

    # -- registration -------------------------------------------------------------
    def register(self, spec: HandlerSpec) -> HandlerSpec:
        """Add a spec; a second registration of the same type raises ValueError naming it."""
        if not spec.type:
            raise ValueError("a handler needs a non-empty task type")
        if spec.type in self._specs:
            raise ValueError(f"a handler for task type {spec.type!r} is already registered")
        check_handler_signature(spec.fn, spec.type, batch=spec.batch)
        self._specs[spec.type] = spec
        return spec

    def handler(
        self,
        type: str,
        *,
        decode: Callable[[TaskData], Any] | None = None,
        queue: str | None = None,
        **options: Any,
    ) -> Callable[[F], F]:
        """Decorator registering ``fn(task, ctx)`` for ``type``."""
        return self._decorator(type, batch=False, decode=decode, queue=queue, options=options)

    def batch_handler(
        self,
        type: str,
        *,
        decode: Callable[[TaskData], Any] | None = None,
        queue: str | None = None,
        **options: Any,
    ) -> Callable[[F], F]:
        """Decorator registering batch handler ``fn(tasks, ctx)`` for ``type``."""
        return self._decorator(type, batch=True, decode=decode, queue=queue, options=options)

    def _decorator(
        self,
        type_: str,
        *,
        batch: bool,
        decode: Callable[[TaskData], Any] | None,
        queue: str | None,
        options: Mapping[str, Any],
    ) -> Callable[[F], F]:
        def wrap(fn: F) -> F:
            spec = HandlerSpec(
                type=type_,
                fn=fn,
                batch=batch,
                is_async=_is_async(fn),
                decode=decode,
                queue=queue,
                options=MappingProxyType(dict(options)),
            )
            self.register(spec)
            return fn

        return wrap

    def middleware(self, mw: Middleware) -> Middleware:
        """Append a middleware (outermost first); returns it."""
        self._middleware.append(mw)
        self._middlewares = tuple(self._middleware)
        return mw

    add_middleware = middleware

    # -- lookup ---------------------------------------------------------------------
    @property
    def middlewares(self) -> tuple[Middleware, ...]:
        return self._middlewares

    @property
    def types(self) -> tuple[str, ...]:
        """Every registered type, sorted."""
        return tuple(sorted(self._specs))

    @property
    def batch_types(self) -> tuple[str, ...]:
        """Types registered with a batch handler, sorted (advertised in Hello)."""
        return tuple(sorted(t for t, s in self._specs.items() if s.batch))

    def __iter__(self) -> Iterator[HandlerSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, type_: object) -> bool:
        return type_ in self._specs

    def __repr__(self) -> str:
        return f"<{type(self).__name__} types={list(self.types)} middleware={len(self._middleware)}>"
