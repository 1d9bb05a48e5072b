"""``conveyor server``: run the reference server (filled in by the server work)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ``server`` command to ``app``."""

    @app.command("server", help="Run the conveyor_server_min reference server.")
    def server() -> None:
        raise typer.Exit(2)
