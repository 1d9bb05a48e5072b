"""``conveyor conformance``: the executable conformance checklist (filled in by the conformance work)."""

from __future__ import annotations

import typer

conformance = typer.Typer(help="Run the conveyor.v1 conformance suite.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``conformance`` group to ``app``."""
    app.add_typer(conformance, name="conformance")

    @conformance.command("run", help="Run the suite against a server and a worker program.")
    def run() -> None:
        raise typer.Exit(2)

    @conformance.command("worker", help="Our worker program for the cross-SDK contract.")
    def worker() -> None:
        raise typer.Exit(2)
