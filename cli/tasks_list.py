"""``conveyor tasks ls``: one page of tasks (or ``--all``), filtered by queue, state and task type.

ListTasks filters by queue and state only, so ``--type`` is applied here: the command reads the
server's pages (1000 tasks per request) and keeps the matching tasks until it has a full page of
them. Its next-page token then names the last task it printed; that is what the server's own tokens
are too (``page_token`` means "resume after this id", ids descending, on this server and conveyord),
so a script pages through a filtered listing exactly as through an unfiltered one. A rare type in a
large queue reads every page up to the end.

``-o json`` prints a bare array of tasks (as always); ``--page-info`` prints
``{"tasks": [...], "next_page_token": "..."}`` instead, the shape a script loops on until the
token is empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

import typer
from rich.markup import escape

from conveyor_cli import _common
from conveyor_cli._client_render import Output, emit_json, emit_tasks, task_dict
from conveyor_cli.client_cmds import DEFAULT, OutputOpt, Server, Token, client_for, tasks
from conveyor_sdk.client import SyncAdmin
from conveyor_sdk.types import TaskInfo

__all__ = ["filtered_page", "iter_filtered", "register"]

SCAN_PAGE = 1000  # tasks per ListTasks request while filtering by type (the server's maximum)
Opt = typer.Option


def filtered_page(
    admin: SyncAdmin,
    *,
    queue: str | None,
    state: str | None,
    types: frozenset[str],
    limit: int,
    page_token: str,
) -> tuple[list[TaskInfo], str]:
    """Up to ``limit`` tasks of one of ``types`` after ``page_token``, and the token that follows."""
    found: list[TaskInfo] = []
    token = page_token
    while True:
        page = admin.list_tasks(queue=queue, state=state, limit=SCAN_PAGE, page_token=token)
        for index, info in enumerate(page.tasks):
            if info.type not in types:
                continue
            found.append(info)
            if len(found) == limit:
                last_row = index == len(page.tasks) - 1 and not page.next_page_token
                return found, "" if last_row else info.id  # resume after the last task printed
        if not page.next_page_token:
            return found, ""
        token = page.next_page_token


def iter_filtered(
    admin: SyncAdmin, *, queue: str | None, state: str | None, types: frozenset[str], page_size: int
) -> Iterator[TaskInfo]:
    """Every task of one of ``types`` (all tasks when ``types`` is empty), following page tokens."""
    size = SCAN_PAGE if types else page_size
    for info in admin.iter_tasks(queue=queue, state=state, page_size=size):
        if not types or info.type in types:
            yield info


@tasks.command("ls")
def tasks_ls(  # noqa: PLR0917  # typer maps each option to one parameter
    queue: Annotated[str | None, Opt("--queue", "-q", help="Only this queue.")] = None,
    state: Annotated[str | None, Opt("--state", "-s", help="pending, scheduled, archived, ...")] = None,
    type_: Annotated[
        list[str] | None,
        Opt(
            "--type",
            "--task-type",
            help="Only this task type (repeatable). The server cannot filter by type: the CLI reads "
            "its pages and keeps the matches, so a rare type in a large queue reads every page.",
        ),
    ] = None,
    limit: Annotated[int, Opt("--limit", "-n", help="Page size (1..1000).")] = 50,
    page_token: Annotated[
        str, Opt("--page-token", help="Continue after this id (the next_page_token of the last page).")
    ] = "",
    all_pages: Annotated[bool, Opt("--all", help="Follow pages until the end.")] = False,
    page_info: Annotated[
        bool,
        Opt(
            "--page-info",
            help='With -o json: print {"tasks": [...], "next_page_token": "..."} (empty token = last '
            "page) instead of the bare array.",
        ),
    ] = False,
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """List tasks, newest first."""
    _common.check_range("--limit", limit, 1, 1000)
    if page_info and output is not Output.json:
        _common.fail("--page-info shapes the JSON output: use it with -o json")
    types = frozenset(type_ or ())
    if "" in types:
        _common.fail("--type needs a task type, e.g. --type email:welcome")
    with client_for(server, token) as client:
        admin = client.admin
        if all_pages:
            found = list(iter_filtered(admin, queue=queue, state=state, types=types, page_size=limit))
            next_token = ""
        elif types:
            found, next_token = filtered_page(
                admin, queue=queue, state=state, types=types, limit=limit, page_token=page_token
            )
        else:
            page = admin.list_tasks(queue=queue, state=state, limit=limit, page_token=page_token)
            found, next_token = list(page.tasks), page.next_page_token
    if output is Output.json and page_info:
        emit_json({"tasks": [task_dict(t) for t in found], "next_page_token": next_token})
        return
    emit_tasks(found, output)
    if next_token and output is Output.table:
        _common.err_console.print(f"more: --page-token {escape(next_token)}")


def register(_app: typer.Typer) -> None:
    """Nothing to add at the root: ``tasks ls`` hangs off the ``tasks`` group (kept for symmetry)."""
