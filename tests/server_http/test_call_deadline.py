"""The unary call deadline: armed only when a handler waits, and then exactly as asyncio.timeout."""

from __future__ import annotations

import asyncio

import pytest

from conveyor_sdk.errors import DeadlineExceeded, NotFound
from conveyor_server_min._http.deadline import with_timeout as _with_timeout


async def _at_once() -> str:
    return "done"


async def _after(delay: float, steps: list[str]) -> str:
    steps.append("started")
    await asyncio.sleep(delay)
    steps.append("resumed")
    await asyncio.sleep(0)
    return "late"


async def _fails_after_wait() -> str:
    await asyncio.sleep(0)
    raise NotFound("gone")


def test_handler_finishing_at_once_returns_without_a_timer() -> None:
    """A handler that never waits returns its result (no timer is left behind on the loop)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert await _with_timeout(_at_once(), 5.0) == "done"
        assert not loop._scheduled  # type: ignore[attr-defined]  # no deadline timer was armed

    asyncio.run(main())


def test_waiting_handler_within_its_deadline_returns_its_result() -> None:
    """A handler that waits (several times) is resumed through to its result."""
    steps: list[str] = []
    assert asyncio.run(_with_timeout(_after(0.01, steps), 5.0)) == "late"
    assert steps == ["started", "resumed"]


def test_waiting_handler_past_its_deadline_fails_deadline_exceeded() -> None:
    """A handler still waiting at its deadline is cancelled and the call fails deadline_exceeded."""
    steps: list[str] = []
    with pytest.raises(DeadlineExceeded):
        asyncio.run(_with_timeout(_after(5.0, steps), 0.05))
    assert steps == ["started"]


def test_error_after_a_wait_propagates() -> None:
    """A ConveyorError raised after the first wait reaches the caller unchanged."""
    with pytest.raises(NotFound):
        asyncio.run(_with_timeout(_fails_after_wait(), 5.0))


def test_cancelling_the_call_cancels_the_waiting_handler() -> None:
    """Cancelling the calling task (RST_STREAM) is forwarded into the resumed handler."""
    cancelled: list[bool] = []

    async def handler(waiting: asyncio.Event) -> str:
        await asyncio.sleep(0)  # the first step ends here; the rest runs resumed under the timer
        waiting.set()
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    async def main() -> None:
        waiting = asyncio.Event()
        task = asyncio.ensure_future(_with_timeout(handler(waiting), 10.0))
        await asyncio.wait_for(waiting.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert cancelled == [True]
