"""Positional constructors for frozen, slotted dataclasses built once per delivered task."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["positional_builder"]


def positional_builder(cls: type[T]) -> Callable[..., T]:
    """A function ``build(*fields)`` (every field, in declaration order) that returns a ``cls``.

    For a ``frozen=True, slots=True`` dataclass made for every delivered task (a Delivery, a
    TaskData, a Job): its own ``__init__`` must set each field through ``object.__setattr__``,
    because the class refuses plain assignment, and that is the slowest way to fill a slot. On
    the way of every Dispatch to its handler that was a measurable share of the worker's CPU per
    task (docs/worker-core.md, "Measuring the hot path", has the commands). The builder sets the
    slots through their descriptors instead, one straight-line statement per field: its source
    is generated once per class, here, because a loop over the fields gives back most of what
    the descriptors save. The result is an ordinary instance: equal, hashed, printed and frozen
    as any other. Only for classes with no ``__post_init__`` and no field outside ``__init__``.
    """
    if not (dataclasses.is_dataclass(cls) and "__slots__" in cls.__dict__):
        raise TypeError(f"{cls.__name__} is not a slots dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__")
    fields = dataclasses.fields(cls)
    if any(not f.init for f in fields):
        raise TypeError(f"{cls.__name__} has a field outside __init__")
    names = [f.name for f in fields]
    ns: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    for name in names:
        ns[f"_set_{name}"] = cls.__dict__[name].__set__
    body = "".join(f"    _set_{n}(o, {n})\n" for n in names)
    exec(f"def build({', '.join(names)}):\n    o = _new(_cls)\n{body}    return o\n", ns)
    build: Callable[..., T] = ns["build"]
    build.__qualname__ = f"positional_builder({cls.__name__})"
    return build
