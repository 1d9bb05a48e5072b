"""Wait on conditions with timeouts (never fixed sleeps)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def _give_up_after(deadline: float, timeout: float, what: object) -> None:
    if time.monotonic() > deadline:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_until(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> T:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        _give_up_after(deadline, timeout, what or predicate)
        time.sleep(interval)
    return value


async def until(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> T:
    """:func:`wait_until` for a plain predicate inside a running event loop (it yields, not blocks)."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        _give_up_after(deadline, timeout, what or predicate)
        await asyncio.sleep(interval)
    return value


async def eventually(
    predicate: Callable[[], Awaitable[T]], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> T:
    """Async form of :func:`wait_until` for coroutine predicates."""
    deadline = time.monotonic() + timeout
    while not (value := await predicate()):
        _give_up_after(deadline, timeout, what or predicate)
        await asyncio.sleep(interval)
    return value
