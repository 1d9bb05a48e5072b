"""Shared CLI plumbing: global connection options and user-error rendering.

A user mistake (bad flag value, unknown task, server unreachable) prints one
line on stderr and exits non-zero; it never shows a traceback.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from conveyor_sdk.errors import ConveyorError

__all__ = [
    "DEFAULT_SERVER",
    "ServerOpt",
    "TokenOpt",
    "err_console",
    "fail",
    "user_errors",
]

DEFAULT_SERVER = "http://localhost:8080"

err_console = Console(stderr=True, highlight=False)

ServerOpt = Annotated[
    str,
    typer.Option("--server", envvar="CONVEYOR_ADDR", help="Server URL (http:// = h2c, https:// = TLS)."),
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", envvar="CONVEYOR_TOKEN", help="Bearer token."),
]


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn ConveyorError / ValueError / OSError into a one-line error and exit code 1."""
    try:
        yield
    except ConveyorError as exc:
        fail(f"{exc.code.connect_name}: {exc.message}")
    except (ValueError, OSError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        sys.exit(130)
