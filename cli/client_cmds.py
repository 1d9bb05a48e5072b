"""Producer and operator commands: enqueue, enqueue-batch, tasks, queues, sessions (filled in by the client work)."""

from __future__ import annotations

import typer

tasks = typer.Typer(help="Inspect and act on tasks.", no_args_is_help=True)
queues = typer.Typer(help="List, pause and resume queues.", no_args_is_help=True)
sessions = typer.Typer(help="List connected worker sessions.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the producer/operator commands to ``app``."""

    @app.command("enqueue", help="Enqueue one task.")
    def enqueue() -> None:
        raise typer.Exit(2)

    @app.command("enqueue-batch", help="Enqueue tasks from a JSONL file.")
    def enqueue_batch() -> None:
        raise typer.Exit(2)

    app.add_typer(tasks, name="tasks")
    app.add_typer(queues, name="queues")
    app.add_typer(sessions, name="sessions")
