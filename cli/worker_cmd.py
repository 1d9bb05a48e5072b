"""``conveyor worker MODULE:ATTR``: the multi-process worker runtime (filled in by the runtime work)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ``worker`` command to ``app``."""

    @app.command("worker", help="Run a worker for an App: supervisor + process pools.")
    def worker() -> None:
        raise typer.Exit(2)
