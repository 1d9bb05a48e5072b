"""A broadcast wake-up for asyncio code: every ``wait()`` pending at ``fire()`` returns."""

from __future__ import annotations

import asyncio

__all__ = ["Signal"]


class Signal:
    """Level-less notification: waiters re-check their condition after each ``fire()``."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def fire(self) -> None:
        """Wake every current waiter."""
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self) -> None:
        """Wait for the next ``fire()`` (cancel-safe)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)
