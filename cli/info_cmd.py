"""``conveyor info``: server and client versions, cluster nodes, broker metrics and queue totals.

conveyor.v1 reports the server's version only in a worker session's ``Welcome``; ``info`` opens
one short session on a private, never-used queue to read it (``--no-version`` skips that).
A failing probe is a warning, not an error: the rest is still shown.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

import typer
from rich.markup import escape

from conveyor_cli import _common
from conveyor_cli._client_render import Output, emit, iso, table
from conveyor_cli.client_cmds import DEFAULT, OutputOpt, Server, Token, client_for
from conveyor_sdk import __version__
from conveyor_sdk.client import ServerVersion, SyncClient
from conveyor_sdk.errors import ConveyorError
from conveyor_sdk.types import TaskState

__all__ = ["register"]

_STATES = [s for s in TaskState if s is not TaskState.UNSPECIFIED and s is not TaskState.CANCELED]


def _version(client: SyncClient, probe: bool) -> ServerVersion | None:
    if not probe:
        return None
    try:
        return client.admin.server_version(timeout=5.0)
    except ConveyorError as exc:
        _common.err_console.print(
            f"[yellow]warning:[/] server version unknown: "
            f"{escape(exc.code.connect_name)}: {escape(exc.message)}",
            soft_wrap=True,
        )
        return None


def _gather(client: SyncClient, probe: bool) -> dict[str, Any]:
    version = _version(client, probe)
    nodes = client.admin.cluster_info()
    broker = client.admin.broker_info()
    queues = client.admin.list_queues()
    totals: Counter[str] = Counter()
    for q in queues:
        totals.update({s.name.lower(): q.counts.get(s, 0) for s in _STATES})
    return {
        "server": client.address,
        "server_version": version.server_version if version else None,
        "min_sdk_version": version.min_sdk_version if version else None,
        "client_version": f"conveyor-py/{__version__}",
        "nodes": [{"address": n.address, "started_at": iso(n.started_at)} for n in nodes],
        "broker": {"driver": broker.driver, "metrics": dict(broker.metrics)},
        "queues": {
            "count": len(queues),
            "paused": sorted(q.name for q in queues if q.paused),
            "totals": {s.name.lower(): totals[s.name.lower()] for s in _STATES},
        },
        "sessions": len(client.admin.list_sessions()),
    }


def _rows(info: dict[str, Any]) -> list[tuple[str, Any]]:
    version = info["server_version"] or "unknown"
    if info["min_sdk_version"]:
        version += f" (admits SDKs >= {info['min_sdk_version']})"
    queues = info["queues"]
    totals = ", ".join(f"{k} {v}" for k, v in queues["totals"].items() if v) or "no tasks"
    paused = f", paused: {', '.join(queues['paused'])}" if queues["paused"] else ""
    rows: list[tuple[str, Any]] = [
        ("server", info["server"]),
        ("server version", version),
        ("client version", info["client_version"]),
    ]
    rows += [(f"node {n['address']}", f"started {n['started_at'] or '?'}") for n in info["nodes"]]
    metrics = ", ".join(f"{k}={v}" for k, v in info["broker"]["metrics"].items())
    rows += [
        ("broker", f"{info['broker']['driver']}" + (f" ({metrics})" if metrics else "")),
        ("queues", f"{queues['count']}{paused}"),
        ("tasks", totals),
        ("worker sessions", info["sessions"]),
    ]
    return rows


def info(
    no_version: Annotated[
        bool, typer.Option("--no-version", help="Skip the session handshake that reads the server version.")
    ] = False,
    output: OutputOpt = Output.table,
    server: Server = DEFAULT,
    token: Token = None,
) -> None:
    """Show server and client versions, cluster nodes, broker metrics and queue totals."""
    with client_for(server, token) as client:
        data = _gather(client, probe=not no_version)
    emit(table("conveyor", ("field", "value"), _rows(data)), data, output)


def register(app: typer.Typer) -> None:
    """Add ``info``."""
    app.command("info", help="Cluster, broker and version information.")(info)
