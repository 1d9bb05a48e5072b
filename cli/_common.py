"""Shared CLI plumbing: global connection options and user-error rendering.

A user mistake (bad flag value, unknown task, server unreachable) prints one
line on stderr and exits non-zero; it never shows a traceback.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from conveyor_sdk.errors import ConveyorError

__all__ = [
    "DEFAULT_SERVER",
    "ServerOpt",
    "TokenOpt",
    "check_range",
    "err_console",
    "fail",
    "run_app",
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


def exit_without_finalization(code: int) -> NoReturn:
    """Flush our output and leave at once, skipping interpreter finalization.

    For commands that ran the HTTP client (pyqwest) for a long time (``events``, ``dashboard``,
    ``server --dashboard-port``): its native (tokio) threads may still hold Python objects when
    the interpreter tears down, which aborted roughly 1 exit in 20 with SIGABRT. Nothing of ours
    is registered to run at exit, so skipping finalization loses nothing.
    """
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def check_range(flag: str, value: int | None, low: int, high: int | None = None) -> None:
    """``error: --flag must be between low and high, got v`` (exit 1) for a value outside its range."""
    if value is None or (value >= low and (high is None or value <= high)):
        return
    bounds = f"between {low} and {high}" if high is not None else f">= {low}"
    fail(f"{flag} must be {bounds}, got {value}")


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn ConveyorError / ValueError / OSError into a one-line error and exit code 1."""
    try:
        yield
    except ConveyorError as exc:
        from conveyor_cli._network import describe  # the address and what to check, in words

        fail(describe(exc) or f"{exc.code.connect_name}: {exc.message}")
    except (ValueError, OSError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        sys.exit(130)


def _usage_error(exc: Exception) -> NoReturn:
    """A command-line usage error as one ``error:`` line (exit 2), or the help for a bare group."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        try:
            from typer import rich_utils

            rich_utils.rich_format_error(exc)  # type: ignore[arg-type]
        except (ImportError, AttributeError):
            exc.show()  # type: ignore[attr-defined]
        sys.exit(int(getattr(exc, "exit_code", 2)))
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    message = exc.format_message()  # type: ignore[attr-defined]
    err_console.print(f"[bold red]error:[/] {escape(message)}{escape(hint)}", soft_wrap=True)
    sys.exit(int(getattr(exc, "exit_code", 2)))


def run_app(app: typer.Typer, args: Sequence[str] | None = None, prog_name: str | None = None) -> NoReturn:
    """Run ``app`` with every error printed in one style: ``error: ...`` on one line.

    Click's own rendering (a boxed "Error" or ``Error: ...``) is replaced for usage
    errors (unknown option, bad value, value out of range: exit 2) and aborts.
    """
    command = typer.main.get_command(app)
    try:
        code = command.main(
            args=list(args) if args is not None else None, prog_name=prog_name, standalone_mode=False
        )
    except typer.Abort:
        err_console.print("[bold red]error:[/] aborted", soft_wrap=True)
        sys.exit(1)
    except Exception as exc:
        # click's ClickException family (duck-typed: typer may vendor click privately)
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        _usage_error(exc)
    sys.exit(code if isinstance(code, int) else 0)
