"""eager_task / Continuation: a coroutine's first step at once, and a task that continues it faithfully."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from conveyor_sdk._h2kernel import probe
from conveyor_sdk._h2kernel.eager import Continuation, eager_task

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("_VAR", default="outside")


async def _in_callback(make: Callable[[], Any]) -> Any:
    """Call ``make()`` from a plain loop callback (outside any task), as a protocol's data_received runs."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    loop.call_soon(lambda: done.set_result(make()))
    return await done


def _eager(coro: Coroutine[Any, Any, Any], name: str = "job") -> Callable[[], asyncio.Task[Any]]:
    return lambda: eager_task(asyncio.get_running_loop(), coro, name)


def test_the_first_step_runs_before_eager_task_returns_inside_the_task() -> None:
    """current_task() is the new task, the step sees the caller's context but writes to its own copy."""
    seen: list[object] = []

    async def job() -> str:
        seen.append((asyncio.current_task(), _VAR.get()))
        _VAR.set("inside")
        await asyncio.sleep(0)
        seen.append(_VAR.get())
        return "done"

    async def main() -> None:
        _VAR.set("caller")
        task = await _in_callback(_eager(job(), "eager-1"))
        assert seen == [(task, "caller")]  # ran already, inside its own task
        assert task.get_name() == "eager-1" and not task.done()
        assert await asyncio.wait_for(task, 10) == "done"
        assert seen[1] == "inside" and _VAR.get() == "caller"

    asyncio.run(main())


def test_a_coroutine_that_finishes_in_its_first_step_gives_its_result_or_error_to_the_task() -> None:
    async def ok() -> int:
        return 7

    async def bad() -> int:
        raise ValueError("boom")

    async def main() -> None:
        good = await _in_callback(_eager(ok()))
        assert await asyncio.wait_for(good, 10) == 7
        failed = await _in_callback(_eager(bad()))
        with pytest.raises(ValueError, match="boom"):
            await asyncio.wait_for(failed, 10)

    asyncio.run(main())


def test_asyncio_timeout_works_in_the_first_step() -> None:
    """asyncio.timeout needs a current task: the eager step has one, and the timer cancels the task."""
    steps: list[str] = []

    async def job() -> None:
        try:
            async with asyncio.timeout(0.05):
                steps.append("armed")
                await asyncio.sleep(30)
        except TimeoutError:
            steps.append("timed out")

    async def main() -> None:
        task = await _in_callback(_eager(job()))
        assert steps == ["armed"]
        await asyncio.wait_for(task, 10)
        assert steps == ["armed", "timed out"]

    asyncio.run(main())


@pytest.mark.h2_fast
@pytest.mark.skipif(not probe.fast, reason="tests the eager start of the kernel's fast path")
def test_cancel_before_the_tasks_own_first_step_reaches_the_coroutine_and_its_future() -> None:
    """Cancelled in the same turn: the coroutine's except/finally run inside the task, the future it
    waited on is cancelled (as Task.cancel does), and the task ends cancelled."""
    steps: list[object] = []
    gate: list[asyncio.Future[None]] = []

    async def job() -> None:
        fut = asyncio.get_running_loop().create_future()
        gate.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            steps.append(("cancelled in", asyncio.current_task()))
            raise

    async def main() -> None:
        def start_and_cancel() -> asyncio.Task[None]:
            task = eager_task(asyncio.get_running_loop(), job(), "c")
            task.cancel()
            return task

        task = await _in_callback(start_and_cancel)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        assert task.cancelled()
        assert steps == [("cancelled in", task)]
        assert gate[0].cancelled()

    asyncio.run(main())


@pytest.mark.h2_fast
@pytest.mark.skipif(not probe.fast, reason="tests the eager start of the kernel's fast path")
def test_cancel_after_a_first_step_that_finished_keeps_the_result() -> None:
    """The work is done already: a cancel that arrives before the task's own step changes nothing."""
    ran: list[str] = []

    async def job() -> str:
        ran.append("ran")
        return "kept"

    async def main() -> None:
        def start_and_cancel() -> asyncio.Task[str]:
            task = eager_task(asyncio.get_running_loop(), job(), "f")
            task.cancel()
            return task

        task = await _in_callback(start_and_cancel)
        assert await asyncio.wait_for(task, 10) == "kept"
        assert ran == ["ran"]

    asyncio.run(main())


def test_inside_a_running_task_the_step_is_left_to_the_loop() -> None:
    """eager_task from a task step cannot switch tasks: it behaves as create_task."""
    seen: list[object] = []

    async def job() -> str:
        seen.append(asyncio.current_task())
        return "later"

    async def main() -> None:
        task = eager_task(asyncio.get_running_loop(), job(), "x")
        assert seen == []
        assert await asyncio.wait_for(task, 10) == "later"
        assert seen == [task]

    asyncio.run(main())


def test_continuation_after_a_step_run_without_a_task() -> None:
    """Continuation.after(coro, yielded): the task waits on what the step yielded, then resumes coro."""

    async def job(fut: asyncio.Future[str]) -> str:
        return "got " + await fut

    async def main() -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        coro = job(fut)
        yielded = coro.send(None)  # the caller's step, outside any task
        assert yielded is fut
        task = loop.create_task(Continuation.after(coro, yielded))
        await asyncio.sleep(0)
        assert not task.done()
        fut.set_result("it")
        assert await asyncio.wait_for(task, 10) == "got it"
        # Awaitable as well: a coroutine may continue another one in its own task.
        fut2: asyncio.Future[str] = loop.create_future()
        coro2 = job(fut2)
        cont = Continuation.after(coro2, coro2.send(None))
        loop.call_soon(fut2.set_result, "more")
        assert await cont == "got more"

    asyncio.run(main())


def test_a_first_step_can_only_run_once() -> None:
    async def job() -> None:
        return None

    cont = Continuation(job())
    cont.step_now(contextvars.copy_context())
    with pytest.raises(RuntimeError, match="already ran"):
        cont.step_now(contextvars.copy_context())
    cont.close()


def test_without_asyncios_task_switch_it_is_plain_create_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python without asyncio's _enter_task (not one we support yet) gets an ordinary task."""
    from conveyor_sdk._h2kernel import eager

    monkeypatch.setattr(eager, "_enter_task", None)
    monkeypatch.setattr(eager, "PUBLIC_EAGER", False)
    seen: list[object] = []

    async def job() -> str:
        seen.append(asyncio.current_task())
        return "plain"

    async def main() -> None:
        def make() -> tuple[asyncio.Task[str], int]:
            task = eager_task(asyncio.get_running_loop(), job(), "plain")
            return task, len(seen)

        task, stepped_at_return = await _in_callback(make)
        assert stepped_at_return == 0  # not stepped when eager_task returned: the loop does it
        assert await asyncio.wait_for(task, 10) == "plain"
        assert seen == [task]

    asyncio.run(main())
