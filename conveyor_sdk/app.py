"""Typed task definitions: one declaration serves the producer and the worker.

Example::

    app = App()

    class Welcome(msgspec.Struct):
        user_id: int

    @app.task("email:welcome", queue="emails", max_retry=5)
    async def send_welcome(payload: Welcome, ctx: TaskContext) -> None: ...

    await send_welcome.enqueue(client, Welcome(user_id=42), process_in=60)  # Client
    send_welcome.enqueue(sync_client, Welcome(user_id=42))                  # SyncClient
    await Worker(...).run(app)                                              # App is a Registry

The payload type comes from the handler's first parameter annotation (msgspec
Struct, dataclass, TypedDict, plain JSON values, ``bytes``, or a protobuf message
class; a batch handler annotates ``list[T]``) and picks the codec:
bytes -> ``application/octet-stream``, protobuf -> ``application/x-protobuf``,
anything else -> ``application/json`` (override with ``content_type=``). The same
type decodes deliveries on the worker; a payload that does not decode is
reported ``SKIP_RETRY`` with the codec's message (retrying the same bytes cannot
succeed). ``max_retry=0`` declares a type that is never retried: its workers report a
failed attempt (an exception, a timeout, a deadline) as ``SKIP_RETRY``, and enqueues send
``max_retry=1`` because 0 on the wire means the server default, 25 (see
``_app_validate.wire_max_retry``); omit ``max_retry`` for that default.
Enqueue checks the payload the same way first, so a mistake raises
:class:`~conveyor_sdk.client.ValidationError` (``err.path`` = the bad field) on
the producer instead of reaching a worker. Decorator options are the defaults of every enqueue and can be
overridden per call.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Generic, TypeVar, Unpack, overload

from conveyor_sdk import tracing
from conveyor_sdk._app_validate import check_payload, validates_payload, wire_max_retry
from conveyor_sdk._client.options import EnqueueOptions, TaskSpec, check_option_names
from conveyor_sdk._encryption.hooks import Encryptor, check_encryptor
from conveyor_sdk._worker.context import TaskContext
from conveyor_sdk._worker.executor import TaskData
from conveyor_sdk._worker.registry import HandlerSpec, Registry
from conveyor_sdk.client import Client, SyncClient
from conveyor_sdk.codecs import CodecRegistry, content_type_for
from conveyor_sdk.types import TaskInfo

__all__ = ["App", "TaskDefinition"]

P = TypeVar("P")
R = TypeVar("R")


def _first_param_type(fn: Callable[..., Any]) -> Any:
    """The annotation of ``fn``'s first parameter (``Any`` when absent)."""
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        raise TypeError(f"task handler {fn.__qualname__} must accept (payload, ctx)")
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError) as exc:
        raise TypeError(f"cannot resolve the payload annotation of {fn.__qualname__}: {exc}") from exc
    return hints.get(params[0].name, Any)


def _element_type(annotation: Any) -> Any:
    """``T`` of ``list[T]`` / ``Sequence[T]`` (``Any`` when unparameterized)."""
    args = typing.get_args(annotation)
    return args[0] if args else Any


class TaskDefinition(Generic[P, R]):
    """A registered task type bound to its payload type ``P`` and handler result ``R``."""

    def __init__(
        self,
        app: App,
        type: str,
        fn: Callable[..., R],
        payload_type: Any,
        *,
        batch: bool,
        defaults: EnqueueOptions,
    ) -> None:
        self.app = app
        self.type = type
        self.fn = fn
        self.payload_type = payload_type
        self.batch = batch
        self.defaults = defaults
        self.element_type = _element_type(payload_type) if batch else payload_type
        self.content_type = defaults.get("content_type") or content_type_for(self.element_type)
        self.raw = self.element_type is TaskData
        self.validates = validates_payload(self.element_type, self.content_type)

    def __call__(self, payload: Any, ctx: TaskContext) -> R:
        """Call the handler directly (tests, local runs)."""
        return self.fn(payload, ctx)

    # -- producer side ------------------------------------------------------------
    def encode(self, payload: P) -> bytes:
        """Payload bytes for ``payload``, validated against the payload type (:class:`ValidationError`)."""
        data, _ = self.app.codecs.encode(payload, self.content_type)
        if self.validates:
            check_payload(self.app.codecs, self.type, self.content_type, self.element_type, data)
        return data

    def options(self, **overrides: Unpack[EnqueueOptions]) -> EnqueueOptions:
        """The decorator defaults merged with per-call ``overrides``."""
        check_option_names(overrides)
        merged: dict[str, Any] = {**self.defaults, **overrides}
        merged["content_type"] = self.content_type
        return typing.cast(EnqueueOptions, wire_max_retry(self.type, self.defaults, merged))

    def spec(self, payload: P, /, **overrides: Unpack[EnqueueOptions]) -> TaskSpec:
        """A :class:`TaskSpec` for ``enqueue_batch`` / ``enqueue_tx``."""
        spec = TaskSpec(self.type, self.encode(payload), **self.options(**overrides))
        spec.encryption = self.app.encryption
        return spec

    @overload
    def enqueue(
        self, client: Client, payload: P, /, **overrides: Unpack[EnqueueOptions]
    ) -> Coroutine[Any, Any, TaskInfo]: ...

    @overload
    def enqueue(self, client: SyncClient, payload: P, /, **overrides: Unpack[EnqueueOptions]) -> TaskInfo: ...

    def enqueue(
        self, client: Client | SyncClient, payload: P, /, **overrides: Unpack[EnqueueOptions]
    ) -> Coroutine[Any, Any, TaskInfo] | TaskInfo:
        """Enqueue through ``client``; awaitable for :class:`Client`, blocking for :class:`SyncClient`."""
        data = self.encode(payload)
        if client.encryption is None and self.app.encryption is not None:
            return client._enqueue(self.type, data, self.options(**overrides), None, self.app.encryption)
        return client.enqueue(self.type, data, **self.options(**overrides))

    # -- worker side --------------------------------------------------------------
    def decode(self, task: TaskData) -> P:
        """Decode one delivery into ``P`` (raises CodecError subclasses on failure)."""
        if self.raw:
            return typing.cast(P, task)
        value: P = self.app.codecs.decode(task.payload, task.content_type, self.element_type)
        return value

    def __repr__(self) -> str:
        kind = "batch task" if self.batch else "task"
        return f"<{kind} {self.type!r} payload={getattr(self.payload_type, '__name__', self.payload_type)}>"


class App(Registry):
    """A :class:`~conveyor_sdk.worker.Registry` of typed task definitions.

    Args:
        codecs: payload codecs for encoding and decoding (default: the built-ins).
        tracing: add :class:`~conveyor_sdk.tracing.TracingMiddleware` when
            opentelemetry-api is importable.
        encryption: an :class:`~conveyor_sdk.encryption.Encryptor` (e.g. a ``Keyring``): workers
            serving this app open sealed payloads with it (unless the ``Worker`` has its own),
            and typed enqueues seal with it when the client has no encryption of its own.
    """

    def __init__(
        self,
        *,
        codecs: CodecRegistry | None = None,
        tracing: bool = True,
        encryption: Encryptor | None = None,
    ) -> None:
        super().__init__()
        self.encryption = check_encryptor(encryption)
        self.codecs = codecs if codecs is not None else CodecRegistry.default()
        self.definitions: dict[str, TaskDefinition[Any, Any]] = {}
        if tracing and _tracing_available():
            self.middleware(_tracing_middleware())

    def task(
        self, type: str, /, *, payload_type: Any = None, **defaults: Unpack[EnqueueOptions]
    ) -> Callable[[Callable[[P, TaskContext], R]], TaskDefinition[P, R]]:
        """Decorator: register ``fn(payload: P, ctx)`` for ``type`` with default enqueue options.

        ``payload_type`` overrides the annotation (e.g. for a type that cannot be resolved).
        """
        wrap: Callable[[Callable[[P, TaskContext], R]], TaskDefinition[P, R]]
        wrap = self._define(type, batch=False, payload_type=payload_type, defaults=defaults)
        return wrap

    def batch_task(
        self, type: str, /, *, payload_type: Any = None, **defaults: Unpack[EnqueueOptions]
    ) -> Callable[[Callable[[list[P], TaskContext], R]], TaskDefinition[P, R]]:
        """Decorator: register batch handler ``fn(payloads: list[P], ctx)`` (serves singles too)."""
        wrap: Callable[[Callable[[list[P], TaskContext], R]], TaskDefinition[P, R]]
        wrap = self._define(type, batch=True, payload_type=payload_type, defaults=defaults)
        return wrap

    def _define(self, type_: str, *, batch: bool, payload_type: Any, defaults: Mapping[str, Any]) -> Any:
        check_option_names(defaults)
        options = typing.cast(EnqueueOptions, dict(defaults))
        given = payload_type

        def wrap(fn: Callable[..., Any]) -> TaskDefinition[Any, Any]:
            payload_type = given if given is not None else _first_param_type(fn)
            if batch and payload_type is not Any and typing.get_origin(payload_type) not in (list, Sequence):
                raise TypeError(f"batch task {type_!r}: annotate the first parameter as list[T]")
            definition: TaskDefinition[Any, Any] = TaskDefinition(
                self, type_, fn, payload_type, batch=batch, defaults=options
            )
            self.register(
                HandlerSpec(
                    type=type_,
                    fn=fn,
                    batch=batch,
                    is_async=inspect.iscoroutinefunction(fn),
                    decode=definition.decode,
                    queue=options.get("queue"),
                    options=dict(options),
                )
            )
            self.definitions[type_] = definition
            return definition

        return wrap

    def __getitem__(self, type: str) -> TaskDefinition[Any, Any]:
        """The definition registered for ``type`` (KeyError when none)."""
        return self.definitions[type]


def _tracing_available() -> bool:
    return tracing.AVAILABLE


def _tracing_middleware() -> tracing.TracingMiddleware:
    return tracing.TracingMiddleware()
