"""Handler signatures are checked at decoration time (Registry and App), with the expected shapes named."""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import pytest

from conveyor_sdk import App
from conveyor_sdk._worker.registry import HandlerSpec, Registry


class Order(msgspec.Struct):
    """A payload type for App tasks."""

    id: int


def test_registry_rejects_a_one_argument_handler_naming_it_and_the_shape() -> None:
    """@registry.handler on fn(task): TypeError naming one() and `(payload, ctx)`; nothing registered."""
    reg = Registry()
    with pytest.raises(TypeError) as info:

        @reg.handler("x")
        def one(task: Any) -> None: ...

    text = str(info.value)
    assert "one(task: 'Any')" in text or "one(task: Any)" in text
    assert "(payload, ctx)" in text and "'x'" in text
    assert "x" not in reg


@pytest.mark.parametrize(
    "source",
    [
        "def h(task, ctx, extra): ...",
        "async def h(): ...",
        "def h(task, *, ctx): ...",
        "def h(task, ctx, *, required): ...",
    ],
)
def test_registry_rejects_other_wrong_shapes(source: str) -> None:
    """Too many required, too few, or keyword-only parameters are rejected at registration."""
    scope: dict[str, Any] = {}
    exec(source, scope)  # builds the handler under test
    with pytest.raises(TypeError, match=r"cannot be called as h\(payload, ctx\)"):
        Registry().handler("x")(scope["h"])


def test_batch_handlers_are_checked_with_the_batch_shape() -> None:
    """A batch handler with one parameter names the batch shape `(payloads: list[T], ctx)`."""
    with pytest.raises(TypeError, match=r"payloads: list\[T\], ctx"):
        Registry().batch_handler("b")(lambda tasks: None)


def test_accepted_shapes() -> None:
    """Defaults, *args, callable objects, partials and bound methods all register."""

    class Callable_:
        def __call__(self, task: Any, ctx: Any) -> None: ...

        def method(self, task: Any, ctx: Any) -> None: ...

    def three(a: Any, task: Any, ctx: Any) -> None: ...

    reg = Registry()
    reg.handler("defaults")(lambda task, ctx, extra=1: None)
    reg.handler("varargs")(lambda *args: None)
    reg.handler("object")(Callable_())
    reg.handler("partial")(functools.partial(three, 1))
    reg.handler("method")(Callable_().method)
    reg.register(HandlerSpec("builtin", print))  # not introspectable in every version: accepted
    assert len(reg) == 6


def test_app_task_rejects_a_wrong_signature_at_decoration() -> None:
    """@app.task on fn(payload) (the observed `one() takes 1 positional argument`) fails at import time."""
    app = App(tracing=False)
    with pytest.raises(TypeError, match=r"handler .*one.* for task type 'shop:one'.*\(payload, ctx\)"):

        @app.task("shop:one")
        def one(payload: Order) -> None: ...

    assert "shop:one" not in app


def test_app_batch_task_rejects_a_wrong_signature() -> None:
    """@app.batch_task on fn(payloads, ctx, extra) fails with the batch shape named."""
    app = App(tracing=False)
    with pytest.raises(TypeError, match=r"payloads: list\[T\], ctx"):

        @app.batch_task("shop:many")
        def many(payloads: list[Order], ctx: Any, extra: int) -> None: ...
