"""Fast constructors for the frozen dataclasses built on the way of every Dispatch to its handler."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from conveyor_sdk._worker.executor import Job, TaskData

T = TypeVar("T")

__all__ = ["new_job", "new_task_data", "positional_builder"]


def positional_builder(cls: type[T]) -> Callable[..., T]:
    """A function ``build(*fields)`` (every field, in declaration order) that returns a ``cls``.

    For a ``frozen=True, slots=True`` dataclass whose instances are made per task: its own
    ``__init__`` stores each field through ``object.__setattr__`` (a frozen class refuses
    plain assignment), several times the cost of a plain store. This one stores through the
    slot descriptors. The result is an ordinary instance: equal, hashed, printed and frozen
    as any other. Only for classes with no ``__post_init__`` and no field that is not in
    ``__init__``.
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


# ``new_task_data(id, queue, type, payload, content_type, metadata, retried, max_retry,
# enqueued_at, timeout, task_deadline, group, process_at)`` and ``new_job(job_id, queue, type, tasks,
# batch, deadline)``: every field, in the order the classes declare them.
new_task_data: Callable[..., TaskData] = positional_builder(TaskData)
new_job: Callable[..., Job] = positional_builder(Job)
