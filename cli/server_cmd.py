"""``conveyor server``: run the reference server with the web dashboard at ``/``.

The server options come from :data:`conveyor_server_min.config.OPTIONS`, the table
``python -m conveyor_server_min`` (the bare server, no CLI) parses too. Values arrive
as text and are validated by ``build_config``: a bad value prints one ``error:`` line
and exits 2. ``python -m conveyor_cli.server_cmd`` runs this command alone, without
loading the other commands (``conveyor worker`` starts its embedded server so).
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from conveyor_server_min.config import OPTIONS, ConfigError, Option, build_config

__all__ = ["main", "register", "server_command"]

_HELP = "Run the conveyor_server_min reference server (gRPC + Connect over h2c, HTTP/1.1 and TLS)."


def _parameter(opt: Option) -> inspect.Parameter:
    if opt.kind == "bool":
        annotation: Any = Annotated[bool, typer.Option(opt.flag, help=opt.help)]
        default: Any = False
    elif opt.kind == "multi":
        annotation = Annotated[list[str] | None, typer.Option(opt.flag, help=opt.help, metavar=opt.metavar)]
        default = None
    else:
        metavar = opt.metavar or ("DURATION" if opt.kind == "duration" else "N" if opt.kind == "int" else "")
        annotation = Annotated[str | None, typer.Option(opt.flag, help=opt.help, metavar=metavar or None)]
        default = None
    return inspect.Parameter(opt.dest, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


DASHBOARD_PARAMS = [
    inspect.Parameter(
        "no_dashboard",
        inspect.Parameter.KEYWORD_ONLY,
        default=False,
        annotation=Annotated[
            bool,
            typer.Option(
                "--no-dashboard",
                help=(
                    "Do not serve the web dashboard at / of the server's port (then / is 404). "
                    "It is on by default and, when the server has --token, asks for its first token "
                    "(or --dashboard-auth-token) at login; see docs/dashboard.md."
                ),
            ),
        ],
    ),
    inspect.Parameter(
        "dashboard_port",
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            int | None,
            typer.Option(
                "--dashboard-port",
                min=0,
                max=65535,
                help="Also serve the dashboard on this extra port (0 = any free port), e.g. on another "
                "interface with --dashboard-host.",
            ),
        ],
    ),
    inspect.Parameter(
        "dashboard_host",
        inspect.Parameter.KEYWORD_ONLY,
        default="127.0.0.1",
        annotation=Annotated[
            str, typer.Option("--dashboard-host", help="Interface of the --dashboard-port listener.")
        ],
    ),
    inspect.Parameter(
        "dashboard_auth_token",
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option(
                "--dashboard-auth-token",
                envvar="CONVEYOR_DASHBOARD_TOKEN",
                help="Login secret for every dashboard page and action (default: the server's first "
                "--token; none without tokens).",
            ),
        ],
    ),
]
_DASHBOARD_FLAGS = ("no_dashboard", "dashboard_port", "dashboard_host", "dashboard_auth_token")
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _run(flags: dict[str, Any]) -> None:
    dashboard = {k: flags.pop(k, None) for k in _DASHBOARD_FLAGS}
    try:
        config = build_config(flags)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    auth = dashboard["dashboard_auth_token"]
    if auth is not None and not auth.strip():
        print("error: --dashboard-auth-token must not be empty", file=sys.stderr)
        raise typer.Exit(2)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from conveyor_server_min.server import run

    at_root = not dashboard["no_dashboard"]
    extra_port = dashboard["dashboard_port"]
    if at_root and config.host not in _LOOPBACK and not (auth or config.tokens):
        print(
            f"warning: the dashboard at / on {config.host} has no login: anyone reaching the port can "
            "operate queues (set --dashboard-auth-token or --token, or pass --no-dashboard)",
            file=sys.stderr,
        )
    try:
        if extra_port is not None:
            code = _run_with_dashboard(config, dashboard, at_root)
        else:
            code = run(config, web=_root_dashboard(config, auth) if at_root else None)
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were installed
        code = 130
    if at_root or extra_port is not None:  # the dashboard ran the HTTP client (exit_without_finalization)
        from conveyor_cli._common import exit_without_finalization

        exit_without_finalization(code)
    raise typer.Exit(code)


def _root_dashboard(config: Any, auth: str | None) -> Callable[[str], Any]:
    """The dashboard factory for ``/`` of the server's port; announces the URL on stderr."""
    from conveyor_cli.dashboard.serve import for_server

    factory = for_server(config, auth)

    def make(url: str) -> Any:
        print(f"dashboard on {url}/ for {url}", file=sys.stderr, flush=True)
        return factory(url)

    return make


def _run_with_dashboard(config: Any, dashboard: dict[str, Any], at_root: bool) -> int:
    from conveyor_cli.dashboard.serve import serve_beside
    from conveyor_sdk._transport import eventloop

    host = dashboard["dashboard_host"] or "127.0.0.1"
    port, auth = dashboard["dashboard_port"], dashboard["dashboard_auth_token"]
    return eventloop.run(serve_beside(config, host, port, auth, at_root=at_root), config.loop)


def server_command() -> Callable[..., None]:
    """The command function, its signature generated from the option table."""

    def command(**flags: Any) -> None:
        _run(flags)

    params = [_parameter(opt) for opt in OPTIONS] + DASHBOARD_PARAMS
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = _HELP
    return command


def register(app: typer.Typer) -> None:
    """Add the ``server`` command to ``app``."""
    app.command("server", help=_HELP)(server_command())


def main(argv: list[str] | None = None) -> None:
    """``python -m conveyor_cli.server_cmd``: the ``conveyor server`` command on its own."""
    from conveyor_cli import _common

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(help=_HELP)(server_command())
    _common.run_app(app, argv, prog_name="conveyor server")


if __name__ == "__main__":
    main()
