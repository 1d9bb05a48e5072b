"""``conveyor events``: a live stream of task lifecycle events (WatchEvents) until Ctrl-C.

``--queue`` and ``--type`` (the event type) filter on the server; ``--task-type``, ``--state`` and
``--task`` filter here (the RPC has no such fields). When the connection drops (a server restart),
the command says so on stderr, retries with capped backoff and says when it is watching again;
events emitted while it was disconnected are not replayed (WatchEvents has no cursor). The first
connection failing is an error, as is any refusal that a retry cannot fix (auth, events disabled).
Ctrl-C exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.markup import escape

from conveyor_cli import _common
from conveyor_cli._admin_render import event_dict, event_line
from conveyor_cli._client_render import Output, stdout_console
from conveyor_cli.client_cmds import DEFAULT, OutputOpt, Server, Token, fail
from conveyor_sdk._client.requests import queue_name
from conveyor_sdk.client import Client, TaskEvent, TaskEventType
from conveyor_sdk.errors import ConveyorError, Unavailable
from conveyor_sdk.types import TaskState

__all__ = ["register"]

_MAX_DELAY = 5.0
_ENDED = "the server ended the stream"
_SETTLED = 2.0
_STOP_WAIT = 5.0  # a stream that lived this long resets the reconnect backoff
_COLORS = {"completed": "green", "archived": "red", "canceled": "magenta", "retried": "yellow"}


@dataclass(frozen=True, slots=True)
class _Filter:
    queues: tuple[str, ...]
    types: tuple[TaskEventType, ...]
    states: frozenset[TaskState]
    tasks: frozenset[str]
    task_types: frozenset[str] = frozenset()

    def wants(self, event: TaskEvent) -> bool:
        return (
            (not self.states or event.state in self.states)
            and (not self.tasks or event.id in self.tasks)
            and (not self.task_types or event.type in self.task_types)
        )


def _notice(message: str) -> None:
    _common.err_console.print(f"[dim]{escape(message)}[/]", soft_wrap=True)


def _printer(output: Output) -> Callable[[TaskEvent], None]:
    if output is Output.json:
        return lambda e: print(json.dumps(event_dict(e)), flush=True)
    if sys.stdout.isatty():
        console = stdout_console()

        def show(e: TaskEvent) -> None:
            color = _COLORS.get(e.event_type.name.lower(), "cyan")
            console.print(f"[{color}]{event_line(e, markup=True)}[/]")

        return show
    return lambda e: print(event_line(e, markup=False), flush=True)


async def _stream(client: Client, flt: _Filter, show: Callable[[TaskEvent], None]) -> tuple[str, bool]:
    """Print events until the stream ends; returns (why it ended, whether any event arrived)."""
    seen = False
    try:
        async for event in client.admin.watch_events(queues=flt.queues, event_types=flt.types):
            seen = True
            if flt.wants(event):
                show(event)
    except Unavailable as exc:
        return exc.message, seen
    return _ENDED, seen


async def _answers(client: Client) -> bool:
    """True when the server answers a unary call right now."""
    try:
        await client.admin.cluster_info()
    except ConveyorError:
        return False
    return True


async def _watch(
    client: Client, flt: _Filter, show: Callable[[TaskEvent], None], stop: asyncio.Event
) -> None:
    delay, first = 0.2, True
    while not stop.is_set():
        try:
            await client.admin.cluster_info()  # the server answers: (re)connected
        except Unavailable:
            if first:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY)
            continue
        if first:
            _notice(f"watching {client.address} (Ctrl-C to stop)")
        else:
            _notice(f"reconnected to {client.address}; events while disconnected are not replayed")
        started = time.monotonic()
        reason, seen = await _stream(client, flt, show)
        if stop.is_set():
            return
        lived = time.monotonic() - started
        if first and not seen and lived < 1.0 and reason != _ENDED and await _answers(client):
            raise Unavailable(reason)  # refused at once by a live server (events disabled): do not retry
        if lived >= _SETTLED:
            delay = 0.2
        first = False
        _notice(f"connection lost ({reason}); reconnecting...")
        await asyncio.sleep(delay)
        delay = min(delay * 2, _MAX_DELAY)


def _filter(
    queues: list[str], types: list[str], states: list[str], tasks: list[str], task_types: list[str]
) -> _Filter:
    if "" in task_types:
        fail("--task-type needs a task type, e.g. --task-type email:welcome")
    try:
        return _Filter(
            queues=tuple(queue_name(q) for q in queues),
            types=tuple(TaskEventType.parse(t) for t in types),
            states=frozenset(TaskState.parse(s) for s in states),
            tasks=frozenset(tasks),
            task_types=frozenset(task_types),
        )
    except ValueError as exc:
        fail(str(exc))


def _on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)


async def _main(server: str, token: str | None, flt: _Filter, output: Output) -> None:
    """Watch until Ctrl-C/SIGTERM: a stop flag, not only task cancellation, ends the reconnect loop."""
    stop = asyncio.Event()
    _on_signals(stop)
    async with Client(server, token=token or None) as client:
        watch = asyncio.create_task(_watch(client, flt, _printer(output), stop))
        stopped = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({watch, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if watch in done:
            stopped.cancel()
            watch.result()
            return
        watch.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(watch, _STOP_WAIT)


def events(  # noqa: PLR0917  # typer maps each option to one parameter
    queue: Annotated[
        list[str] | None, typer.Option("--queue", "-q", help="Only these queues (repeatable).")
    ] = None,
    type_: Annotated[
        list[str] | None,
        typer.Option(
            "--type", "-t", help="enqueued|scheduled|leased|completed|retried|archived|canceled|released."
        ),
    ] = None,
    state: Annotated[
        list[str] | None, typer.Option("--state", "-s", help="Only events leaving the task in this state.")
    ] = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="Only this task id (repeatable).")] = None,
    task_type: Annotated[
        list[str] | None,
        typer.Option(
            "--task-type",
            help="Only events of tasks of this type (repeatable; filtered here: WatchEvents has no such "
            "field). --type is the event type.",
        ),
    ] = None,
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Stream task lifecycle events, one line each (``-o json``: JSON lines), until Ctrl-C."""
    flt = _filter(queue or [], type_ or [], state or [], task or [], task_type or [])
    try:
        asyncio.run(_main(server, token, flt, output))
    except KeyboardInterrupt:
        pass
    except ConveyorError as exc:
        fail(f"{exc.code.connect_name}: {exc.message}")
    except (ValueError, OSError) as exc:
        fail(str(exc))
    _common.exit_without_finalization(0)


def register(app: typer.Typer) -> None:
    """Add ``events``."""
    app.command("events", help="Live task lifecycle events until Ctrl-C.")(events)
