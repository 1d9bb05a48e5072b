"""``conveyor enqueue-tx`` and ``conveyor tasks purge``.

``tasks purge`` deletes every task of one queue in one terminal state through BatchDeleteTasks
(1000 ids per request). It lists the matching ids first, then asks for confirmation on a
terminal; without a terminal it refuses unless ``--yes`` is given, so a script never deletes
by accident. Tasks that change state in between are reported per id, never deleted blindly.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from conveyor_cli import _common
from conveyor_cli._client_batch import BadLines, run_batch
from conveyor_cli._client_render import Output, emit_json, stdout_console
from conveyor_cli.client_cmds import (
    DEFAULT,
    OutputOpt,
    Server,
    Token,
    client_for,
    fail,
    report_bad_lines,
    tasks,
)
from conveyor_sdk._client.options import MAX_BATCH
from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import TaskActionResult, TaskState

__all__ = ["register"]

PURGEABLE = (TaskState.COMPLETED, TaskState.ARCHIVED, TaskState.CANCELED)
Opt = typer.Option


def enqueue_tx(
    file: Annotated[Path, Opt("--file", "-f", help="JSONL: one task object per line ('-' = stdin).")],
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Enqueue up to 1000 tasks from a JSONL file atomically (EnqueueTx): all or nothing."""
    with client_for(server, token) as client:
        try:
            run_batch(client, file, tx=True, chunk=MAX_BATCH, output=output)
        except BadLines as exc:
            report_bad_lines(exc)


def _confirm(count: int, state: TaskState, queue: str) -> None:
    what = f"{count} {state.name.lower()} task(s) from queue {queue!r}"
    if not sys.stdin.isatty():
        fail(f"refusing to delete {what} without confirmation (stdin is not a terminal); pass --yes")
    if not typer.confirm(f"Delete {what}?", default=False):
        fail("aborted; nothing was deleted")


def _delete(client: SyncClient, ids: list[str]) -> list[TaskActionResult]:
    results: list[TaskActionResult] = []
    for start in range(0, len(ids), MAX_BATCH):
        results.extend(client.admin.batch("delete", ids[start : start + MAX_BATCH]))
    return results


@tasks.command("purge")
def tasks_purge(  # noqa: PLR0917  # typer maps each option to one parameter
    queue: Annotated[str, Opt("--queue", "-q", help="Queue to purge.")],
    state: Annotated[str, Opt("--state", "-s", help="completed, archived or canceled.")],
    yes: Annotated[bool, Opt("--yes", "-y", help="Do not ask for confirmation.")] = False,
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Delete every task of QUEUE in a terminal STATE (asks first on a terminal)."""
    try:
        parsed = TaskState.parse(state)
    except ValueError as exc:
        fail(str(exc))
    if parsed not in PURGEABLE:
        fail(f"--state {state!r}: purge only deletes finished tasks; use completed, archived or canceled")
    with client_for(server, token) as client:
        if not any(q.name == queue for q in client.admin.list_queues()):
            fail(f"unknown queue {queue!r}: it has no tasks (see `conveyor queues ls`)")
        ids = [t.id for t in client.admin.iter_tasks(queue=queue, state=parsed, page_size=MAX_BATCH)]
        if ids and not yes:
            _confirm(len(ids), parsed, queue)
        results = _delete(client, ids) if ids else []
    failed = [r for r in results if r.error]
    if output is Output.json:
        emit_json({
            "queue": queue, "state": parsed.name.lower(), "matched": len(ids),
            "deleted": len(ids) - len(failed), "failed": [{"id": r.id, "error": r.error} for r in failed],
        })  # fmt: skip
    else:
        stdout_console().print(
            f"deleted {len(ids) - len(failed)} of {len(ids)} {parsed.name.lower()} task(s)"
        )
        for r in failed[:100]:
            _common.err_console.print(f"  {escape(r.id)}: {escape(r.error)}", soft_wrap=True)
    if failed:
        fail(f"{len(failed)} of {len(ids)} task(s) were not deleted")


def register(app: typer.Typer) -> None:
    """Add ``enqueue-tx`` (``tasks purge`` hangs off the ``tasks`` group)."""
    app.command("enqueue-tx", help="Enqueue tasks from a JSONL file atomically.")(enqueue_tx)
