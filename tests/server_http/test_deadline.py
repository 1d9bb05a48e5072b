"""Deadline (the connections' idle and body timers): one lazily re-armed timer, on a scripted loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conveyor_server_min._http import limits
from conveyor_server_min._http.limits import Deadline


class _Handle:
    def __init__(self, when: float, callback: Any) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class _Loop:
    """The two loop methods Deadline uses; time moves only through ``advance``."""

    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[_Handle] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any) -> _Handle:
        handle = _Handle(when, callback)
        self.timers.append(handle)
        return handle

    def advance(self, seconds: float) -> None:
        """Move time on, running every live timer due on the way in order of due time."""
        target = self.now + seconds
        while due := [h for h in self.timers if not h.cancelled and h.when <= target]:
            handle = min(due, key=lambda h: h.when)
            self.timers.remove(handle)
            self.now = handle.when
            handle.callback()
        self.now = target

    def live(self) -> list[float]:
        return [h.when for h in self.timers if not h.cancelled]


def test_a_later_deadline_moves_no_timer_and_fires_once_it_has_passed() -> None:
    """Pushing the deadline later keeps the one timer; it fires early, re-arms, and the callback
    runs once, at the last deadline set."""
    loop, fired = _Loop(), []
    deadline = Deadline(lambda: fired.append(loop.now), loop)  # type: ignore[arg-type]
    deadline.set(10)
    loop.advance(4)
    deadline.set(10)  # now due at 114
    assert loop.live() == [110.0]
    loop.advance(6)
    assert fired == [] and loop.live() == [114.0]
    loop.advance(10)
    assert fired == [114.0] and loop.live() == []


def test_an_earlier_deadline_replaces_the_timer_and_cancel_stops_it() -> None:
    """Moving the deadline earlier cancels the armed timer for a new one; cancel() means never."""
    loop, fired = _Loop(), []
    deadline = Deadline(lambda: fired.append(loop.now), loop)  # type: ignore[arg-type]
    deadline.set(10)
    deadline.set(2)
    assert loop.live() == [102.0]
    loop.advance(3)
    assert fired == [102.0]
    deadline.set(5)
    deadline.cancel()
    loop.advance(60)
    assert fired == [102.0]


def test_the_running_loop_is_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a loop given, the first set() takes the running one and later calls reuse it (the
    lookup is a system call per request before Python 3.12)."""

    async def main() -> None:
        fired = asyncio.Event()
        deadline = Deadline(fired.set)
        deadline.set(30)

        def no_lookup() -> asyncio.AbstractEventLoop:
            raise AssertionError("asyncio.get_running_loop() called again")

        monkeypatch.setattr(limits.asyncio, "get_running_loop", no_lookup)
        deadline.set(0)  # earlier: a new timer on the same loop
        await asyncio.wait_for(fired.wait(), 5)

    asyncio.run(main())
