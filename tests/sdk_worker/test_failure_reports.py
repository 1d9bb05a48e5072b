"""A failed task is debuggable: the log has the traceback and the fate (retry n/max or archived),
and the server's last_error names the exception type, message and innermost file:line, bounded."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from conveyor_sdk._worker.outcomes import MAX_ERROR_MSG, outcome_for_exception
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_sdk.types import RetryPolicy, TaskState
from conveyor_sdk.worker import Registry, SkipRetry, TaskContext, TaskData
from tests.sdk_worker._helpers import KEEP, running, wait_state

FAST = RetryPolicy(base=0.05, max=0.1)


def _lookup(table: dict[str, int]) -> int:
    return table["missing"]


def test_failures_log_traceback_and_fate_and_report_the_location(
    memory: Callable[..., MemoryServer], caplog: pytest.LogCaptureFixture
) -> None:
    """KeyError, max_retry 2: `retry 1/2`, `retry 2/2`, `archived after 3 attempts`, each with a traceback."""
    reg = Registry()

    @reg.handler("lookup")
    def lookup(task: TaskData, ctx: TaskContext) -> None:
        _lookup({})

    @reg.handler("skip")
    def skip(task: TaskData, ctx: TaskContext) -> None:
        raise SkipRetry("bad input")

    async def main() -> None:
        async with memory() as server, server.client() as client, running(server.worker(), reg):
            info = await client.enqueue("lookup", b"", max_retry=2, retry_policy=FAST, **KEEP)
            skipped = await client.enqueue("skip", b"", **KEEP)
            done = await wait_state(client, info.id, TaskState.ARCHIVED)
            await wait_state(client, skipped.id, TaskState.ARCHIVED)
            return done.last_error, info.id, skipped.id

    caplog.set_level(logging.INFO, logger="conveyor")
    last_error, task_id, skip_id = asyncio.run(main())
    line = _lookup.__code__.co_firstlineno + 1
    summary, _, stack = last_error.partition("\n")
    assert summary.endswith(
        f"KeyError: 'missing' (at tests/sdk_worker/test_failure_reports.py:{line} in _lookup)"
    )
    # below the summary, the stack the dashboard and `tasks get` show: the handler's frames, innermost last
    assert stack.startswith("Traceback (most recent call last):\n"), last_error
    assert stack.index(", in lookup\n") < stack.index(f"line {line}, in _lookup")
    assert "conveyor_sdk" not in stack  # the SDK's own frames are left out
    failures = [r for r in caplog.records if r.getMessage().startswith(f"task {task_id} ")]
    fates = [r.getMessage().split(" failed, ", 1)[1].split(":", 1)[0] for r in failures]
    assert fates == ["retry 1/2", "retry 2/2", "archived after 3 attempts"]
    assert [r.levelname for r in failures] == ["WARNING", "WARNING", "ERROR"]
    for record in failures:
        assert getattr(record, "task_id", "") == task_id
        assert record.exc_text is not None and record.exc_text.startswith(
            "Traceback (most recent call last):"
        )
        assert f"line {line}, in _lookup" in record.exc_text and "in lookup" in record.exc_text
        assert "(lookup)" in record.getMessage()
    [skipped] = [r for r in caplog.records if r.getMessage().startswith(f"task {skip_id} ")]
    assert "failed, not retried (archived): bad input" in skipped.getMessage()
    assert "(RETRY)" not in caplog.text


def test_last_error_is_bounded_and_keeps_the_location(memory: Callable[..., MemoryServer]) -> None:
    """A 100 kB exception message is cut: last_error stays within the bound and still ends with file:line."""
    reg = Registry()

    @reg.handler("huge")
    async def huge(task: TaskData, ctx: TaskContext) -> None:
        raise ValueError("x" * 100_000)

    async def main() -> str:
        async with memory() as server, server.client() as client, running(server.worker(), reg):
            info = await client.enqueue("huge", b"", max_retry=1, retry_policy=FAST, **KEEP)
            done = await wait_state(client, info.id, TaskState.ARCHIVED, check=lambda i: bool(i.last_error))
            return done.last_error

    last_error = asyncio.run(main())
    assert last_error.startswith(("ValueError: xxx", "retries exhausted: ValueError: xxx"))
    assert len(last_error) <= MAX_ERROR_MSG + len("retries exhausted: ")
    line = huge.__code__.co_firstlineno + 2
    assert last_error.endswith(f"xxx... (at tests/sdk_worker/test_failure_reports.py:{line} in huge)")


def _ping(n: int) -> int:  # two functions in turn: tracebacks fold a frame repeated in a row, not these
    return _pong(n - 1) if n else _lookup({})


def _pong(n: int) -> int:
    return _ping(n - 1)


def test_a_deep_stack_keeps_its_innermost_frames_within_the_bound() -> None:
    """300 frames do not fit the bound: the outer ones are cut (marked), the failing frame is kept."""
    try:
        _ping(300)
    except KeyError as exc:
        error = outcome_for_exception(exc).error_msg
    assert len(error) <= MAX_ERROR_MSG
    summary, _, stack = error.partition("\n")
    assert summary.startswith("KeyError: 'missing' (at ")
    assert stack.startswith("Traceback (most recent call last):\n  ... (outer frames cut) ...\n")
    assert 'in _lookup\n    return table["missing"]' in stack.rsplit("File ", 1)[1]  # the last frame kept
