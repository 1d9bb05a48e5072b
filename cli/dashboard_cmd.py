"""``conveyor dashboard``: serve the web dashboard for any conveyor.v1 server (docs/dashboard.md)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from conveyor_cli._common import DEFAULT_SERVER, ServerOpt, TokenOpt, exit_without_finalization, fail

__all__ = ["register"]

HostOpt = Annotated[str, typer.Option("--host", help="Interface to listen on (default: loopback only).")]
PortOpt = Annotated[
    int, typer.Option("--port", help="Port to listen on (0 = any free port).", min=0, max=65535)
]
AuthOpt = Annotated[
    str | None,
    typer.Option(
        "--auth-token",
        envvar="CONVEYOR_DASHBOARD_TOKEN",
        help="Require this token (login form or ?token=) for every page and action.",
    ),
]
PollOpt = Annotated[
    float, typer.Option("--poll", help="Seconds between live updates in the browser.", min=0.2)
]


def dashboard(
    *,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8081,
    auth_token: AuthOpt = None,
    poll: PollOpt = 1.5,
) -> None:
    """Serve the web dashboard (queues, tasks, workers, cron, live events) for SERVER."""
    from conveyor_cli.dashboard.config import DashboardConfig
    from conveyor_cli.dashboard.serve import bind, serve_alone, url_of

    if auth_token is not None and not auth_token.strip():
        fail("--auth-token must not be empty")
    if host not in {"127.0.0.1", "localhost", "::1"} and not auth_token:
        warn = f"warning: listening on {host} without --auth-token: anyone reaching it can operate queues"
        typer.echo(warn, err=True)
    try:
        sock = bind(host, port)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    config = DashboardConfig(server=server, token=token, auth_token=auth_token, poll_interval=poll)
    print(f"dashboard on {url_of(sock)} for {server}", flush=True)
    try:
        code = asyncio.run(serve_alone(config, sock))
    except KeyboardInterrupt:  # before the loop's handlers were installed
        code = 130
    finally:
        sock.close()
    exit_without_finalization(code)


def register(app: typer.Typer) -> None:
    """Add the ``dashboard`` command to ``app``."""
    app.command("dashboard")(dashboard)
