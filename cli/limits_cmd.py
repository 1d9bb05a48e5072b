"""``conveyor ratelimit|concurrency|group set|ls|rm``: per-queue dispatch limits and group thresholds.

``set`` on a queue that has no tasks and no worker warns but proceeds (limits may be set
ahead of time); ``rm`` of a limit that does not exist is an error (most likely a typo).
Every number is checked here against what the wire can carry and the server accepts (integers
are int32 >= 1, durations > 0 and within google.protobuf.Duration, rates finite > 0), and a
value outside says the valid range, before anything is sent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from rich.markup import escape

from conveyor_cli import _common
from conveyor_cli._admin_render import emit_concurrency, emit_groups, emit_rates
from conveyor_cli._client_render import Output, emit_json
from conveyor_cli._queue_check import warn_unknown_queue
from conveyor_cli.client_cmds import DEFAULT, OutputOpt, Server, Token, client_for, fail
from conveyor_sdk.durations import parse_duration

__all__ = ["INT32_MAX", "MAX_SECONDS", "parse_positive_duration", "parse_rate", "register"]

ratelimit = typer.Typer(help="Per-queue dispatch rate limits (token bucket).", no_args_is_help=True)
concurrency = typer.Typer(help="Per-queue limits on active tasks per concurrency key.", no_args_is_help=True)
group = typer.Typer(help="Per-group aggregation thresholds.", no_args_is_help=True)
Opt = typer.Option
QueueArg = Annotated[str, typer.Argument(metavar="QUEUE", help="Queue name.")]

_RATE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?:/\s*(s|sec|m|min|h|hour))?\s*$")
_PER = {None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hour": 3600.0}
INT32_MAX = 2**31 - 1  # the wire type of burst, max_active and max_size
MAX_SECONDS = 315_576_000_000  # google.protobuf.Duration's upper bound (10,000 years)
_COUNT = f"1..{INT32_MAX}"


def parse_rate(text: str) -> float:
    """``50``, ``50/s``, ``120/m`` or ``3600/h`` -> tasks per second (ValueError otherwise)."""
    match = _RATE.match(text)
    if not match:
        raise ValueError(f"--rate {text!r}: use tasks per second, e.g. 50, 50/s, 120/m or 3600/h")
    value = float(match.group(1)) / _PER[match.group(2)]
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"--rate must be a finite number greater than 0, got {text!r}")
    return value


def parse_positive_duration(flag: str, text: str) -> float:
    """Seconds in ``text`` (``500ms``, ``10s``, ``1m``, seconds), > 0 and within a protobuf Duration."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None
    if not 0 < seconds <= MAX_SECONDS:  # also refuses nan
        raise ValueError(
            f"{flag} must be greater than 0 and at most {MAX_SECONDS} s (10,000 years), e.g. 500ms, "
            f"10s or 1m; got {text!r}"
        )
    return seconds


def _done(message: str, plain: dict[str, str], output: Output) -> None:
    if output is Output.json:
        emit_json({**plain, "removed": True})
    else:
        _common.err_console.print(escape(message), soft_wrap=True)


@ratelimit.command("set")
def ratelimit_set(  # noqa: PLR0917  # typer maps each option to one parameter
    queue: QueueArg,
    rate: Annotated[str, Opt("--rate", "-r", help="Tasks per second: 50, 50/s, 120/m, 3600/h.")],
    burst: Annotated[int, Opt("--burst", "-b", help=f"Token-bucket depth ({_COUNT}).")] = 1,
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Limit QUEUE to RATE dispatches per second with a BURST allowance."""
    try:
        per_sec = parse_rate(rate)
    except ValueError as exc:
        fail(str(exc))
    _common.check_range("--burst", burst, 1, INT32_MAX)
    with client_for(server, token) as client:
        warn_unknown_queue(client, queue, "setting the rate limit")
        client.admin.set_rate_limit(queue, per_sec, burst=burst)
        emit_rates([r for r in client.admin.list_rate_limits() if r.queue == queue], output)


@ratelimit.command("ls")
def ratelimit_ls(output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None) -> None:
    """List per-queue rate limits."""
    with client_for(server, token) as client:
        emit_rates(client.admin.list_rate_limits(), output)


@ratelimit.command("rm")
def ratelimit_rm(
    queue: QueueArg, output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None
) -> None:
    """Remove QUEUE's rate limit (the server's global default applies again)."""
    with client_for(server, token) as client:
        admin = client.admin
        _remove(
            queue, admin.list_rate_limits, admin.delete_rate_limit, what="rate limit", command="ratelimit",
            output=output,
        )  # fmt: skip


@concurrency.command("set")
def concurrency_set(
    queue: QueueArg,
    limit: Annotated[
        int, Opt("--limit", "--max", "-n", help=f"Active tasks per concurrency key ({_COUNT}).")
    ],
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Allow at most LIMIT active tasks per concurrency_key on QUEUE."""
    _common.check_range("--limit", limit, 1, INT32_MAX)
    with client_for(server, token) as client:
        warn_unknown_queue(client, queue, "setting the concurrency limit")
        client.admin.set_concurrency_limit(queue, limit)
        rows = [c for c in client.admin.list_concurrency_limits() if c.queue == queue]
        emit_concurrency(rows, output)


@concurrency.command("ls")
def concurrency_ls(output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None) -> None:
    """List per-queue concurrency limits."""
    with client_for(server, token) as client:
        emit_concurrency(client.admin.list_concurrency_limits(), output)


@concurrency.command("rm")
def concurrency_rm(
    queue: QueueArg, output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None
) -> None:
    """Remove QUEUE's concurrency limit (its keys become unbounded)."""
    with client_for(server, token) as client:
        admin = client.admin
        _remove(
            queue, admin.list_concurrency_limits, admin.delete_concurrency_limit, what="concurrency limit",
            command="concurrency", output=output,
        )  # fmt: skip


def _remove(
    queue: str,
    listing: Callable[[], Sequence[Any]],
    delete: Callable[[str], object],
    *,
    what: str,
    command: str,
    output: Output,
) -> None:
    """``rm`` for a per-queue setting: refuse when QUEUE has none, else delete and confirm."""
    if not any(row.queue == queue for row in listing()):
        fail(f"queue {queue!r} has no {what} (see `conveyor {command} ls`)")
    delete(queue)
    _done(f"removed the {what} of {queue}", {"queue": queue}, output)


GroupArg = Annotated[str, typer.Argument(metavar="[GROUP]", help="Group key; omitted = queue-wide default.")]


@group.command("set")
def group_set(  # noqa: PLR0917  # typer maps each option to one parameter
    queue: QueueArg,
    group_key: GroupArg = "",
    max_size: Annotated[
        int | None, Opt("--max-size", help=f"Fire when this many members wait ({_COUNT}).")
    ] = None,
    max_delay: Annotated[
        str | None, Opt("--max-delay", help="Fire this long after the first member (> 0, e.g. 1m).")
    ] = None,
    grace: Annotated[
        str | None,
        Opt("--grace-period", "--grace", help="Fire this long after the last member (> 0, e.g. 10s)."),
    ] = None,
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Override aggregation thresholds for GROUP on QUEUE (all three thresholds required)."""
    given = (
        ("--max-size N", f"{_COUNT}", max_size),
        ("--max-delay D", "> 0, e.g. 1m", max_delay),
        ("--grace-period D", "> 0, e.g. 10s", grace),
    )
    missing = [f"{flag} ({valid})" for flag, valid, value in given if value is None]
    if missing:
        fail(f"group set needs {', '.join(missing)}: the server takes all three thresholds together")
    assert max_size is not None and max_delay is not None and grace is not None  # checked just above
    _common.check_range("--max-size", max_size, 1, INT32_MAX)
    try:
        delay = parse_positive_duration("--max-delay", max_delay)
        period = parse_positive_duration("--grace-period", grace)
    except ValueError as exc:
        fail(str(exc))
    with client_for(server, token) as client:
        warn_unknown_queue(client, queue, "setting the group thresholds")
        client.admin.set_group_config(
            queue, group_key, max_size=max_size, max_delay=delay, grace_period=period
        )
        rows = [g for g in client.admin.list_group_configs() if (g.queue, g.group) == (queue, group_key)]
        emit_groups(rows, output)


@group.command("ls")
def group_ls(output: OutputOpt = Output.table, server: Server = DEFAULT, token: Token = None) -> None:
    """List group threshold overrides."""
    with client_for(server, token) as client:
        emit_groups(client.admin.list_group_configs(), output)


@group.command("rm")
def group_rm(
    queue: QueueArg,
    group_key: GroupArg = "",
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Remove the override of GROUP on QUEUE (defaults apply again)."""
    with client_for(server, token) as client:
        if not any((g.queue, g.group) == (queue, group_key) for g in client.admin.list_group_configs()):
            what = f"group {group_key!r}" if group_key else "a queue-wide default"
            fail(f"queue {queue!r} has no override for {what} (see `conveyor group ls`)")
        client.admin.delete_group_config(queue, group_key)
        message = f"removed the group override of {queue} {group_key}".rstrip()
        _done(message, {"queue": queue, "group": group_key}, output)


def register(app: typer.Typer) -> None:
    """Add ``ratelimit``, ``concurrency`` and ``group``."""
    app.add_typer(ratelimit, name="ratelimit")
    app.add_typer(concurrency, name="concurrency")
    app.add_typer(group, name="group")
