"""A failed task's recorded stack: `tasks get` shows all of it, `tasks ls` one line per task."""

from __future__ import annotations

from typing import Any

from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import RetryPolicy, TaskState
from conveyor_sdk.worker import Registry
from tests._util import wait_until
from tests.cli_client._helpers import run, run_json, uid
from tests.cli_client._worker import worker_thread


def _inner() -> bytes:
    raise LookupError("no such order")


def test_tasks_get_shows_the_stack_and_tasks_ls_the_summary(server_url: str) -> None:
    """The worker records `Type: message (at ...)` and the handler's stack; ls keeps one row per task."""
    queue = uid("q")
    reg = Registry()
    reg.handler("charge")(lambda task, ctx: _inner())
    with SyncClient(server_url) as client, worker_thread(server_url, reg, [queue]):
        tid = client.enqueue(
            "charge",
            None,
            queue=queue,
            max_retry=1,
            retry_policy=RetryPolicy(base=0.05, max=0.1),
            retention=600,
        ).id

        def archived() -> Any:
            info = client.get_task(tid)
            return info if info.state is TaskState.ARCHIVED else None

        wait_until(archived, timeout=30, what="the task archived")
    shown = run_json(server_url, "tasks", "get", tid)["last_error"]
    summary, _, stack = shown.partition("\n")
    assert "LookupError: no such order (at tests/cli_client/test_last_error_cli.py:" in summary
    assert stack.startswith("Traceback (most recent call last):") and ", in _inner\n" in stack
    table = run(server_url, "tasks", "ls", "-q", queue, "--state", "archived")
    assert table.exit_code == 0, table.stderr
    assert "LookupError" in table.stdout and "Traceback" not in table.stdout
