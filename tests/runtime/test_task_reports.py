"""What a worker reports per task: never-retry types (max_retry=0) are attempted once, every
finished task gets a log line (timeouts included, with their fate), and the line can be turned off."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

from conveyor_sdk.app import App
from conveyor_sdk.client import Client, ValidationError
from conveyor_sdk.types import RetryPolicy, TaskState
from conveyor_sdk.worker import TaskContext, Worker
from tests.sdk_worker._helpers import running, wait_state

FAST = RetryPolicy(base=0.05, max=0.1)


def _never_retry_app(attempts: Counter[str]) -> App:
    app = App(tracing=False)

    @app.task("once:fail", max_retry=0, retention=3600)
    async def fail(payload: dict[str, int], ctx: TaskContext) -> None:
        attempts["fail"] += 1
        raise RuntimeError("boom")

    @app.task("once:hang", max_retry=0, timeout=0.3, retention=3600)
    async def hang(payload: dict[str, int], ctx: TaskContext) -> None:
        attempts["hang"] += 1
        await asyncio.sleep(3600)

    return app


def test_never_retry_type_is_attempted_exactly_once(
    server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A max_retry=0 handler that raises, and one that times out, each run once and are archived."""
    attempts: Counter[str] = Counter()
    app = _never_retry_app(attempts)

    async def main() -> tuple[object, object]:
        async with Client(server_url) as client, running(Worker(server_url), app):
            failed = await app["once:fail"].enqueue(client, {"n": 1}, retry_policy=FAST)
            hung = await app["once:hang"].enqueue(client, {"n": 2}, retry_policy=FAST)
            return (
                await wait_state(client, failed.id, TaskState.ARCHIVED),
                await wait_state(client, hung.id, TaskState.ARCHIVED),
            )

    caplog.set_level(logging.INFO, logger="conveyor")
    failed, hung = asyncio.run(main())
    assert attempts == Counter({"fail": 1, "hang": 1})
    assert failed.retried == 0 and "RuntimeError: boom" in failed.last_error  # type: ignore[attr-defined]
    assert hung.retried == 0 and "deadline exceeded" in hung.last_error  # type: ignore[attr-defined]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("task ")]
    assert any(f"task {hung.id} (once:hang) failed, not retried (archived): deadline exceeded" in m  # type: ignore[attr-defined]
               for m in lines), lines  # fmt: skip


def test_enqueue_max_retry_zero_is_refused_with_the_way_to_no_retries(server_url: str) -> None:
    """Client.enqueue(max_retry=0) raises ValidationError naming the default and @app.task(max_retry=0)."""

    async def main() -> None:
        async with Client(server_url) as client:
            await client.enqueue("t", b"", max_retry=0)

    with pytest.raises(ValidationError, match=r"server default \(25 retries\).*max_retry=0\)"):
        asyncio.run(main())


def test_never_retry_type_refuses_a_per_call_budget() -> None:
    """A per-call max_retry on a type declared max_retry=0 is refused (its workers would ignore it)."""
    app = _never_retry_app(Counter())
    with pytest.raises(ValidationError, match="declared never-retry"):
        app["once:fail"].options(max_retry=3)
    assert app["once:fail"].options()["max_retry"] == 1  # what the wire can carry


def test_timeout_is_logged_with_its_fate_and_successes_get_a_line(
    server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A timed-out attempt logs `failed, retry 1/1: deadline exceeded`; a success logs `succeeded in`."""
    app = App(tracing=False)
    seen: Counter[str] = Counter()

    @app.task("rep:slow", timeout=0.3, max_retry=1, retention=3600)
    async def slow(payload: dict[str, int], ctx: TaskContext) -> None:
        seen["slow"] += 1
        await asyncio.sleep(3600)

    @app.task("rep:ok", retention=3600)
    async def ok(payload: dict[str, int], ctx: TaskContext) -> None:
        seen["ok"] += 1

    async def main() -> tuple[str, str, dict[str, object]]:
        worker = Worker(server_url)
        async with Client(server_url) as client, running(worker, app):
            slow_info = await app["rep:slow"].enqueue(client, {"n": 1}, retry_policy=FAST)
            ok_info = await app["rep:ok"].enqueue(client, {"n": 2})
            await wait_state(client, slow_info.id, TaskState.ARCHIVED)
            await wait_state(client, ok_info.id, TaskState.COMPLETED)
            stats = worker.statistics()
        return slow_info.id, ok_info.id, stats

    caplog.set_level(logging.INFO, logger="conveyor")
    slow_id, ok_id, stats = asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records]
    mine = [m for m in messages if m.startswith(f"task {slow_id} ")]
    fates = [m.split(" failed, ", 1)[1].split(":", 1)[0] for m in mine]
    assert fates == ["retry 1/1", "archived after 2 attempts"]
    assert stats["handler_failures"] == 2
    [success] = [m for m in messages if m.startswith(f"task {ok_id} ")]
    assert success.startswith(f"task {ok_id} (rep:ok) succeeded in ") and success.endswith("retried 0/25")


def test_task_log_off_keeps_failures_and_drops_successes(
    server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Worker(task_log=False): no success line, the failure line stays."""
    app = App(tracing=False)

    @app.task("quiet:ok", retention=3600)
    async def ok(payload: dict[str, int], ctx: TaskContext) -> None:
        return None

    @app.task("quiet:bad", max_retry=0, retention=3600)
    async def bad(payload: dict[str, int], ctx: TaskContext) -> None:
        raise ValueError("nope")

    async def main() -> tuple[str, str]:
        async with Client(server_url) as client, running(Worker(server_url, task_log=False), app):
            ok_info = await app["quiet:ok"].enqueue(client, {"n": 1})
            bad_info = await app["quiet:bad"].enqueue(client, {"n": 2})
            await wait_state(client, ok_info.id, TaskState.COMPLETED)
            await wait_state(client, bad_info.id, TaskState.ARCHIVED)
        return ok_info.id, bad_info.id

    caplog.set_level(logging.INFO, logger="conveyor")
    ok_id, bad_id = asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if m.startswith(f"task {ok_id} ")]
    assert [m for m in messages if m.startswith(f"task {bad_id} ")]
