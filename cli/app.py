"""Root of the ``conveyor`` command: one typer app, each command group in its own module."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from conveyor_cli import (
    _common,
    client_cmds,
    conformance_cmd,
    cron_cmd,
    dashboard_cmd,
    events_cmd,
    info_cmd,
    limits_cmd,
    server_cmd,
    tasks_extra,
    tasks_list,
    worker_cmd,
)
from conveyor_cli._network import CA_ENV

app = typer.Typer(
    name="conveyor",
    help="Conveyor for Python: run workers, the reference server, producer and operator commands.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from conveyor_sdk._version import __version__

        typer.echo(f"conveyor {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    ca_file: Annotated[
        str | None,
        typer.Option(
            "--ca-file",
            envvar=CA_ENV,
            metavar="PEM",
            help="CA bundle that verifies an https:// server, for every command (default: system trust).",
        ),
    ] = None,
) -> None:
    """Conveyor for Python: run workers, the reference server, producer and operator commands."""
    if ca_file:  # the commands read it from the environment (the worker's own --ca-file too)
        os.environ[CA_ENV] = ca_file


server_cmd.register(app)
worker_cmd.register(app)
client_cmds.register(app)
tasks_extra.register(app)
tasks_list.register(app)
cron_cmd.register(app)
limits_cmd.register(app)
events_cmd.register(app)
info_cmd.register(app)
dashboard_cmd.register(app)
conformance_cmd.register(app)


def main() -> None:
    """Console-script entry point (errors in one style: ``error: ...``)."""
    _common.run_app(app)


if __name__ == "__main__":
    main()
