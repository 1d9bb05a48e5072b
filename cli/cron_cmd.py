"""``conveyor cron add|ls|get|pause|resume|rm``: recurring tasks, with each entry's next fire time.

Specs are 6-field, seconds-first cron expressions (``0 0 2 * * *`` = 02:00:00 daily); the server
validates them and its reason is shown verbatim. A new entry has no next fire time until the
server's scheduler arms it on its next tick; ``add`` waits up to 3 s for that before printing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from conveyor_cli import _common
from conveyor_cli._admin_render import emit_cron, emit_cron_list
from conveyor_cli._client_options import parse_options
from conveyor_cli._client_render import Output, emit_json
from conveyor_cli.client_cmds import DEFAULT, OutputOpt, Server, Token, client_for, fail
from conveyor_sdk.client import CronEntry, SyncClient
from conveyor_sdk.codecs import JSON, OCTET_STREAM
from conveyor_sdk.errors import NotFound

__all__ = ["register"]

cron = typer.Typer(
    help="Recurring tasks: add, list, pause, resume and remove cron entries.", no_args_is_help=True
)
Opt = typer.Option
IdArg = Annotated[str, typer.Argument(metavar="ID", help="Cron entry id.")]
_ARM_WAIT = 3.0


def _payload(json_text: str | None, payload_file: Path | None) -> tuple[Any, str | None]:
    if json_text is not None and payload_file is not None:
        fail("use --json or --payload-file, not both")
    if json_text is not None:
        try:
            return json.loads(json_text), JSON
        except ValueError as exc:
            fail(f"--json is not valid JSON: {exc}")
    if payload_file is not None:
        try:
            data = payload_file.read_bytes()
        except OSError as exc:
            fail(f"cannot read --payload-file: {exc}")
        return data, JSON if payload_file.suffix == ".json" else OCTET_STREAM
    return None, None


def _armed(client: SyncClient, id: str) -> CronEntry:
    """The entry, waiting (bounded) for the scheduler to compute its next fire time."""
    deadline = time.monotonic() + _ARM_WAIT
    entry = client.admin.get_cron(id)
    while entry.next_run_at is None and not entry.paused and time.monotonic() < deadline:
        time.sleep(0.1)
        entry = client.admin.get_cron(id)
    return entry


def _retry(strategy: str | None, base: str | None, cap: str | None) -> dict[str, Any] | None:
    if strategy is None and base is None and cap is None:
        return None
    return {"strategy": strategy or "default", "base": base, "max": cap}


@cron.command("add")
def cron_add(  # noqa: PLR0917  # typer maps each option to one parameter
    id: IdArg,
    spec: Annotated[str, typer.Argument(metavar="SPEC", help="6 fields, seconds first: '0 0 2 * * *'.")],
    type_: Annotated[str, typer.Argument(metavar="TYPE", help="Task type to enqueue on each fire.")],
    json_text: Annotated[str | None, Opt("--json", help="Payload as a JSON document.")] = None,
    payload_file: Annotated[Path | None, Opt("--payload-file", help="Payload bytes (*.json = JSON).")] = None,
    content_type: Annotated[str | None, Opt("--content-type", help="Payload codec name.")] = None,
    queue: Annotated[str | None, Opt("--queue", "-q", help="Queue (default: default).")] = None,
    priority: Annotated[int | None, Opt("--priority", "-p", help="1 (low) .. 9 (high).")] = None,
    max_retry: Annotated[int | None, Opt("--max-retry", help="Retry budget (0 = server default).")] = None,
    timeout: Annotated[str | None, Opt("--timeout", help="Per-attempt bound, e.g. 30s.")] = None,
    retention: Annotated[str | None, Opt("--retention", help="Keep completed rows, e.g. 24h.")] = None,
    group: Annotated[str | None, Opt("--group", help="Aggregation group key.")] = None,
    concurrency_key: Annotated[str | None, Opt("--concurrency-key", help="Concurrency cap key.")] = None,
    retry_strategy: Annotated[str | None, Opt("--retry-strategy", help="exponential|linear|fixed.")] = None,
    retry_base: Annotated[str | None, Opt("--retry-base", help="Backoff base, e.g. 2s.")] = None,
    retry_max: Annotated[str | None, Opt("--retry-max", help="Backoff cap, e.g. 10m.")] = None,
    paused: Annotated[bool, Opt("--paused", help="Create it paused.")] = False,
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Create or replace cron entry ID that enqueues TYPE on SPEC."""
    payload, ctype = _payload(json_text, payload_file)
    with client_for(server, token) as client:
        options = parse_options({
            "queue": queue, "content_type": content_type or ctype, "priority": priority,
            "max_retry": max_retry, "timeout": timeout, "retention": retention, "group": group,
            "concurrency_key": concurrency_key, "retry_policy": _retry(retry_strategy, retry_base, retry_max),
        })  # fmt: skip
        client.admin.upsert_cron(id, spec, type_, payload, paused=paused, **options)  # type: ignore[misc]  # CronOptions keys
        emit_cron(_armed(client, id), output)


@cron.command("ls")
def cron_ls(output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None) -> None:
    """List cron entries with their next fire time."""
    with client_for(server, token) as client:
        emit_cron_list(client.admin.list_cron(), output)


def _get(client: SyncClient, id: str) -> CronEntry:
    try:
        return client.admin.get_cron(id)
    except NotFound:
        fail(f"no cron entry {id!r} (see `conveyor cron ls`)")


@cron.command("get")
def cron_get(
    id: IdArg, output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None
) -> None:
    """Show one cron entry."""
    with client_for(server, token) as client:
        emit_cron(_get(client, id), output)


@cron.command("pause")
def cron_pause(
    id: IdArg, output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None
) -> None:
    """Stop entry ID from firing until resumed."""
    with client_for(server, token) as client:
        _get(client, id)
        client.admin.pause_cron(id)
        emit_cron(client.admin.get_cron(id), output)


@cron.command("resume")
def cron_resume(
    id: IdArg, output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None
) -> None:
    """Resume entry ID (re-armed from now: missed fires are not replayed)."""
    with client_for(server, token) as client:
        _get(client, id)
        client.admin.resume_cron(id)
        emit_cron(_armed(client, id), output)


@cron.command("rm")
def cron_rm(
    id: IdArg, output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None
) -> None:
    """Remove entry ID (tasks it already enqueued stay)."""
    with client_for(server, token) as client:
        _get(client, id)
        client.admin.delete_cron(id)
    if output is Output.json:
        emit_json({"id": id, "deleted": True})
    else:
        _common.err_console.print(f"removed cron entry {escape(id)}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``cron``."""
    app.add_typer(cron, name="cron")
