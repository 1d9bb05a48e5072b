"""A broadcast wake-up for asyncio code: every ``wait()`` pending at ``fire()`` returns."""

from __future__ import annotations

import asyncio

__all__ = ["Signal"]


class Signal:
    """Level-less notification: waiters re-check their condition after each ``fire()``."""

    __slots__ = ("loop", "waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        # ``loop``: the loop every wait() runs on, when the owner knows it. Looking the running loop
        # up costs a getpid() system call per wait on Python 3.11 (asyncio checks it is not a fork).
        self.loop = loop
        self.waiters: list[asyncio.Future[None]] = []  # read-only outside: empty = fire() is a no-op

    def fire(self) -> None:
        """Wake every current waiter."""
        if not self.waiters:
            return  # the usual case for most signals: nobody waits, so no new list either
        waiters, self.waiters = self.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self) -> None:
        """Wait for the next ``fire()`` (cancel-safe)."""
        fut: asyncio.Future[None] = (self.loop or asyncio.get_running_loop()).create_future()
        self.waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self.waiters:
                self.waiters.remove(fut)
