"""The SDK's one clock: SystemClock reads the C clocks, ManualClock fires timers at their instants."""

from __future__ import annotations

import asyncio
import time

import pytest

from conveyor_sdk._transport.clock import ManualClock, SystemClock
from conveyor_sdk.errors import InvalidArgument


def test_manual_clock_runs_due_callbacks_in_time_order_and_refuses_to_go_back() -> None:
    """advance() fires what fell due, earliest first, skips cancelled ones; a negative step is refused."""

    async def main() -> None:
        clock = ManualClock(wall=100.0)
        fired: list[str] = []
        clock.call_at(102.0, lambda: fired.append("b"))
        clock.call_at(101.0, lambda: fired.append("a"))
        clock.call_at(101.5, lambda: fired.append("x")).cancel()
        clock.call_at(103.0, lambda: fired.append("c"))
        await clock.advance(2.0)
        assert (fired, clock.now(), clock.next_timer, clock.pending) == (["a", "b"], 102.0, 1.0, 1)
        with pytest.raises(InvalidArgument):
            await clock.advance(-1.0)
        assert clock.now() == 102.0

    asyncio.run(main())


def test_wall_and_monotonic_timers_interleave_each_at_its_own_instant() -> None:
    """call_at (wall) and call_later / sleep (monotonic) timers fire in one time order; each sees
    both clocks at its own instant, and a task it wakes runs before the next one fires."""

    async def main() -> None:
        clock = ManualClock(wall=5000.0, monotonic=1000.0)
        seen: list[tuple[str, float, float]] = []

        def note(name: str) -> None:
            seen.append((name, clock.time(), clock.monotonic()))

        async def sleeper() -> None:
            await clock.sleep(1.0)
            note("slept")  # runs before the wall timer at +1.5 fires

        task = asyncio.ensure_future(sleeper())
        await asyncio.sleep(0)  # the sleeper arms its timer
        clock.call_at(clock.now() + 1.5, lambda: note("at"))
        clock.call_later(2.0, lambda: note("later"))
        await clock.advance(3.0)
        await task
        assert seen == [
            ("slept", 5001.0, 1001.0),
            ("at", 5001.5, 1001.5),
            ("later", 5002.0, 1002.0),
        ]
        assert (clock.now(), clock.time(), clock.monotonic(), clock.next_timer) == (
            5003.0,
            5003.0,
            1003.0,
            None,
        )

    asyncio.run(main())


def test_a_deadline_computed_from_now_falls_due_when_the_steps_add_up_to_it() -> None:
    """A deadline 0.5 s on (wall or monotonic) has not fired after 0.49 s and has after 0.01 s more."""

    async def main() -> None:
        clock = ManualClock()
        fired: list[str] = []
        clock.call_at(clock.now() + 0.5, lambda: fired.append("wall"))
        clock.call_later(0.5, lambda: fired.append("monotonic"))
        await clock.advance(0.49)
        assert fired == []
        await clock.advance(0.01)
        # both fell due at this step; which of two clocks' timers at one instant goes first is not a promise
        assert sorted(fired) == ["monotonic", "wall"]

    asyncio.run(main())


def test_manual_clock_refuses_a_start_that_is_not_a_finite_number() -> None:
    """A NaN or infinite start would make every comparison with a deadline meaningless."""
    for bad in ({"wall": float("nan")}, {"monotonic": float("inf")}):
        with pytest.raises(InvalidArgument):
            ManualClock(**bad)


def test_system_clock_reads_the_c_clocks_and_arms_loop_timers() -> None:
    """now/time/monotonic are time.time and time.monotonic themselves (no Python frame per read);
    call_at, call_later and sleep run on the running loop."""
    clock = SystemClock()
    assert (clock.now, clock.time, clock.monotonic) == (time.time, time.time, time.monotonic)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = {"at": loop.create_future(), "later": loop.create_future()}
        clock.call_at(clock.now() + 0.01, lambda: done["at"].set_result(clock.now()))
        clock.call_later(0.01, lambda: done["later"].set_result(clock.monotonic()))
        cancelled = clock.call_later(0.0, lambda: done["at"].set_result(-1.0))
        cancelled.cancel()
        began_wall, began = clock.now(), clock.monotonic()
        fired_at = await asyncio.wait_for(done["at"], 5)
        assert fired_at >= began_wall
        assert await asyncio.wait_for(done["later"], 5) >= began
        await clock.sleep(0.01)
        assert clock.monotonic() - began >= 0.01

    asyncio.run(main())
