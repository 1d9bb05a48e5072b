"""Producer and operator commands: enqueue, enqueue-batch, tasks, queues, sessions.

Thin: flags -> :mod:`conveyor_cli._client_options` -> :class:`~conveyor_sdk.client.SyncClient`
-> :mod:`conveyor_cli._client_render`. User mistakes (bad JSON, bad option,
unknown id, server down) print one ``error:`` line and exit 1, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape

from conveyor_cli import _common
from conveyor_cli._client_batch import BadLines, run_batch
from conveyor_cli._client_options import parse_dependency, parse_metadata, parse_options
from conveyor_cli._client_render import (
    Output,
    emit_json,
    emit_queues,
    emit_results,
    emit_sessions,
    emit_task,
)
from conveyor_cli._enqueue_app import apply_app
from conveyor_cli._network import CA_ENV, describe
from conveyor_cli._queue_check import warn_unknown_queue
from conveyor_sdk.client import SyncClient
from conveyor_sdk.codecs import JSON, OCTET_STREAM
from conveyor_sdk.errors import ConveyorError, NotFound
from conveyor_sdk.types import TaskActionResult

__all__ = ["register"]

tasks = typer.Typer(help="Inspect and act on tasks.", no_args_is_help=True)
queues = typer.Typer(help="List, pause and resume queues.", no_args_is_help=True)
sessions = typer.Typer(help="List connected worker sessions.", no_args_is_help=True)

OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table (default) or json.")]
Server = _common.ServerOpt
Token = _common.TokenOpt
DEFAULT = _common.DEFAULT_SERVER
Opt = typer.Option


def fail(message: str, code: int = 1) -> NoReturn:
    """One-line error (``fail`` escapes markup: server messages may contain brackets)."""
    _common.fail(message, code)


@contextlib.contextmanager
def client_for(server: str, token: str | None, encryption: Any = None) -> Iterator[SyncClient]:
    """A SyncClient whose failures become one-line errors."""
    ca_file = os.environ.get(CA_ENV) or None
    try:
        ca = Path(ca_file).read_bytes() if ca_file else None
    except OSError as exc:
        fail(f"{CA_ENV}={ca_file}: cannot read the CA bundle: {exc.strerror or exc}")
    try:
        with SyncClient(server, token=token or None, encryption=encryption, tls_ca_cert=ca) as client:
            yield client
    except ConveyorError as exc:
        fail(describe(exc) or f"{exc.code.connect_name}: {exc.message}")
    except (ValueError, OSError) as exc:
        fail(str(exc))


_RETENTION_HINT = (
    "it never existed, or it finished and was removed when its retention ended (by default "
    "completed tasks are kept for no time at all; enqueue with --retention 24h to keep them)"
)
_MAX_LISTED = 100


def not_found(task_id: str) -> NoReturn:
    """The one-line answer for an unknown task id, explaining retention."""
    fail(f"task {task_id!r} not found: {_RETENTION_HINT}")


def report_bad_lines(exc: BadLines) -> NoReturn:
    """Every bad JSONL line on stderr (up to 100), then the one ``error:`` line."""
    if len(exc.problems) > 1:
        for problem in exc.problems[:_MAX_LISTED]:
            _common.err_console.print(escape(problem), soft_wrap=True)
        if len(exc.problems) > _MAX_LISTED:
            _common.err_console.print(f"... and {len(exc.problems) - _MAX_LISTED} more bad lines")
    fail(str(exc))


def _payload(
    json_text: str | None, data_file: Path | None, content_type: str | None, normalize: bool = False
) -> tuple[Any, str | None]:
    if json_text is not None and data_file is not None:
        fail("use --json or --data-file, not both")
    if json_text is not None:
        try:
            value = json.loads(json_text)
        except ValueError as exc:
            fail(f"--json is not valid JSON: {exc}")
        # Valid JSON is sent byte for byte; --normalize re-encodes it (sorted keys, Go escaping).
        return (value if normalize else json_text.encode()), content_type or JSON
    if data_file is not None:
        try:
            data = sys.stdin.buffer.read() if str(data_file) == "-" else data_file.read_bytes()
        except OSError as exc:
            fail(f"cannot read --data-file: {exc}")
        return data, content_type or (JSON if data_file.suffix == ".json" else OCTET_STREAM)
    return None, content_type


def _encryption(encrypt: bool | None, key_file: Path | None) -> Any:
    """The keyring for ``enqueue``: never from the command line, only a key file or the environment."""
    from conveyor_sdk.encryption import KEY_ENV, KEY_FILE_ENV, load_keyring

    if encrypt is False:
        if key_file is not None:
            fail("--key-file and --no-encrypt contradict each other")
        return None
    try:
        ring = load_keyring(key_file)
    except ValueError as exc:
        fail(str(exc))
    if ring is None and encrypt:
        fail(f"--encrypt needs keys: pass --key-file or set ${KEY_ENV} / ${KEY_FILE_ENV}")
    return ring


def _retry_policy(strategy: str | None, base: str | None, cap: str | None) -> dict[str, Any] | None:
    if strategy is None and base is None and cap is None:
        return None
    return {"strategy": strategy or "default", "base": base, "max": cap}


def enqueue(  # noqa: PLR0917  # typer maps each option to one parameter
    type_: Annotated[str, typer.Argument(metavar="TYPE", help="Task type (handler routing key).")],
    json_text: Annotated[str | None, Opt("--json", help="Payload as a JSON document.")] = None,
    data_file: Annotated[
        Path | None, Opt("--data-file", help="Payload bytes from a file ('-' = stdin); *.json = JSON.")
    ] = None,
    content_type: Annotated[str | None, Opt("--content-type", help="Payload codec name.")] = None,
    task_id: Annotated[str | None, Opt("--id", help="Client-assigned task id (idempotent).")] = None,
    queue: Annotated[str | None, Opt("--queue", "-q", help="Queue (default: default).")] = None,
    meta: Annotated[list[str] | None, Opt("--meta", help="Metadata key=value (repeatable).")] = None,
    max_retry: Annotated[
        int | None, Opt("--max-retry", help="Retry budget, at least 1 (omit: the server default, 25).")
    ] = None,
    timeout: Annotated[str | None, Opt("--timeout", help="Per-attempt bound, e.g. 30s.")] = None,
    deadline: Annotated[str | None, Opt("--deadline", help="ISO time after which it must not run.")] = None,
    process_at: Annotated[str | None, Opt("--process-at", help="ISO due time.")] = None,
    process_in: Annotated[str | None, Opt("--process-in", help="Delay, e.g. 5m.")] = None,
    unique_key: Annotated[str | None, Opt("--unique-key", help="Uniqueness claim.")] = None,
    unique_ttl: Annotated[str | None, Opt("--unique-ttl", help="Claim lifetime, e.g. 1h.")] = None,
    priority: Annotated[int | None, Opt("--priority", "-p", help="1 (low) .. 9 (high).")] = None,
    retention: Annotated[str | None, Opt("--retention", help="Keep completed row, e.g. 24h.")] = None,
    group: Annotated[str | None, Opt("--group", help="Aggregation group key.")] = None,
    expires_in: Annotated[str | None, Opt("--expires-in", help="Pre-dispatch TTL, e.g. 10m.")] = None,
    expires_at: Annotated[str | None, Opt("--expires-at", help="Pre-dispatch expiry (ISO).")] = None,
    depends_on: Annotated[
        list[str] | None, Opt("--depends-on", help="ID[:block|cascade_cancel|continue] (repeatable).")
    ] = None,
    concurrency_key: Annotated[str | None, Opt("--concurrency-key", help="Concurrency cap key.")] = None,
    retry_strategy: Annotated[str | None, Opt("--retry-strategy", help="exponential|linear|fixed.")] = None,
    retry_base: Annotated[str | None, Opt("--retry-base", help="Backoff base, e.g. 2s.")] = None,
    retry_max: Annotated[str | None, Opt("--retry-max", help="Backoff cap, e.g. 10m.")] = None,
    app_ref: Annotated[
        str | None, Opt("--app", help="MODULE:ATTR: use the app's declared queue/options, check the payload.")
    ] = None,
    normalize: Annotated[
        bool, Opt("--normalize", help="Re-encode --json (sorted keys, Go escaping) instead of as given.")
    ] = False,
    encrypt: Annotated[
        bool | None,
        Opt(
            "--encrypt/--no-encrypt",
            help="Seal the payload (AES-256-GCM); keys from --key-file or $CONVEYOR_ENCRYPTION_KEY(_FILE); "
            "default: on when those variables are set.",
        ),
    ] = None,
    key_file: Annotated[
        Path | None, Opt("--key-file", help="Key file: <id>:<base64-secret> lines, first active.")
    ] = None,
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Enqueue one task and print the committed TaskInfo."""
    _common.check_range("--priority", priority, 1, 9)
    _common.check_range("--max-retry", max_retry, 0)
    payload, ctype = _payload(json_text, data_file, content_type, normalize)
    with client_for(server, token, _encryption(encrypt, key_file)) as client:
        raw: dict[str, Any] = {
            "task_id": task_id, "queue": queue, "content_type": ctype, "max_retry": max_retry,
            "timeout": timeout, "deadline": deadline, "process_at": process_at, "process_in": process_in,
            "unique_key": unique_key, "unique_ttl": unique_ttl, "priority": priority, "retention": retention,
            "group": group, "expires_in": expires_in, "expires_at": expires_at,
            "concurrency_key": concurrency_key, "metadata": parse_metadata(meta) if meta else None,
            "retry_policy": _retry_policy(retry_strategy, retry_base, retry_max),
        }  # fmt: skip
        options = parse_options(raw)
        if depends_on:
            options["depends_on"] = [parse_dependency(d) for d in depends_on]
        if app_ref:
            payload, options = apply_app(app_ref, type_, payload, options)  # type: ignore[assignment]
        emit_task(client.enqueue(type_, payload, **options), output)


def enqueue_batch(  # noqa: PLR0917  # typer maps each option to one parameter
    file: Annotated[Path, Opt("--file", "-f", help="JSONL: one task object per line ('-' = stdin).")],
    tx: Annotated[bool, Opt("--tx", help="Atomic (EnqueueTx): all or nothing; at most 1000 lines.")] = False,
    chunk: Annotated[int, Opt("--chunk-size", help="Tasks per request (1..1000).")] = 1000,
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Enqueue tasks from a JSONL file in chunks of up to 1000 (progress bar for large files)."""
    _common.check_range("--chunk-size", chunk, 1, 1000)
    with client_for(server, token) as client:
        try:
            failed = run_batch(client, file, tx=tx, chunk=chunk, output=output)
        except BadLines as exc:
            report_bad_lines(exc)
    if failed:
        fail(f"{failed} task(s) were not enqueued")


@tasks.command("get")
def tasks_get(
    id: Annotated[str, typer.Argument(help="Task id.")],
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Show one task."""
    with client_for(server, token) as client:
        try:
            info = client.get_task(id)
        except NotFound:
            not_found(id)
        emit_task(info, output)


def _cancel_one_by_one(client: SyncClient, results: list[TaskActionResult]) -> list[TaskActionResult]:
    """Retry each failed id with CancelTask, as the single-id form does.

    BatchCancelTasks refuses ACTIVE tasks, while CancelTask sends them a best-effort Cancel;
    with this step ``tasks cancel A B`` behaves exactly like ``tasks cancel A; tasks cancel B``.
    """
    out = []
    for result in results:
        fixed = result
        if result.error:
            try:
                client.admin.cancel_task(result.id)
                fixed = TaskActionResult(id=result.id)
            except ConveyorError as exc:
                fixed = TaskActionResult(id=result.id, error=exc.message)
        out.append(fixed)
    return out


def _action(name: str, help_text: str) -> None:
    @tasks.command(name, help=help_text)
    def command(
        ids: Annotated[list[str], typer.Argument(help="One or more task ids.")],
        output: OutputOpt = Output.table,
        server: Server = DEFAULT,
        token: Token = None,
    ) -> None:
        with client_for(server, token) as client:
            if len(ids) == 1:
                try:
                    getattr(client.admin, f"{name}_task")(ids[0])
                except NotFound:
                    not_found(ids[0])
                if output is Output.json:
                    emit_json({"id": ids[0], "error": ""})
                else:
                    _common.err_console.print(f"{name}: {escape(ids[0])} ok")
                return
            results = client.admin.batch(name, ids)  # type: ignore[arg-type]  # name is one of the four
            if name == "cancel":
                results = _cancel_one_by_one(client, results)
            emit_results(results, output)
        if any(r.error for r in results):
            fail(f"{sum(1 for r in results if r.error)} of {len(results)} failed")


for _name, _help in (
    ("cancel", "Cancel waiting tasks (active ones get a best-effort Cancel)."),
    ("run", "Make scheduled/retry/archived tasks due now."),
    ("delete", "Delete tasks that are not active."),
    ("archive", "Dead-letter waiting tasks."),
):
    _action(_name, _help)


@tasks.command("reschedule")
def tasks_reschedule(
    id: Annotated[str, typer.Argument(help="Task id.")],
    at: Annotated[str | None, Opt("--at", help="New ISO due time.")] = None,
    in_: Annotated[str | None, Opt("--in", help="New delay from now, e.g. 10m.")] = None,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Move a waiting task to a new due time (exactly one of --at / --in)."""
    with client_for(server, token) as client:
        options = parse_options({"process_at": at, "process_in": in_})
        client.admin.reschedule_task(
            id, process_at=options.get("process_at"), process_in=options.get("process_in")
        )
        _common.err_console.print(f"rescheduled {escape(id)}")


@queues.command("ls")
def queues_ls(output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None) -> None:
    """List queues with per-state counts."""
    with client_for(server, token) as client:
        emit_queues(client.admin.list_queues(), output)


@queues.command("pause")
def queues_pause(
    queue: Annotated[str, typer.Argument()],
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Stop dispatching from a queue (a queue with no tasks or workers yet is paused with a warning)."""
    with client_for(server, token) as client:
        warn_unknown_queue(client, queue, "pausing it")
        client.admin.pause_queue(queue)
    _queue_done(queue, paused=True, output=output)


def _queue_done(queue: str, *, paused: bool, output: Output) -> None:
    if output is Output.json:
        emit_json({"queue": queue, "paused": paused})
    else:
        _common.err_console.print(f"{'paused' if paused else 'resumed'} {escape(queue)}")


@queues.command("resume")
def queues_resume(
    queue: Annotated[str, typer.Argument()],
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Resume dispatching from a queue."""
    with client_for(server, token) as client:
        client.admin.resume_queue(queue)
    _queue_done(queue, paused=False, output=output)


@sessions.command("ls")
def sessions_ls(output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None) -> None:
    """List worker sessions connected to the server."""
    with client_for(server, token) as client:
        emit_sessions(client.admin.list_sessions(), output)


def register(app: typer.Typer) -> None:
    """Add the producer/operator commands to ``app``."""
    app.command("enqueue", help="Enqueue one task.")(enqueue)
    app.command("enqueue-batch", help="Enqueue tasks from a JSONL file.")(enqueue_batch)
    app.add_typer(tasks, name="tasks")
    app.add_typer(queues, name="queues")
    app.add_typer(sessions, name="sessions")
