"""``python -m conveyor_server_min``: the reference server's own command line (argparse, no CLI).

The flags are :data:`conveyor_server_min.config.OPTIONS`, the table ``conveyor server``
builds its typer command from, and ``build_config`` validates both, so the two entry
points accept the same server options and reject bad values with the same one-line
``error:`` message and exit code 2. This entry point is the bare server: it imports
neither the CLI nor typer (each test's server process starts faster for it, and the
server stays below the CLI in the layer map, CONTRIBUTING.md "Layers"). The web
dashboard is the CLI's: ``conveyor server`` serves it at ``/`` of the same port.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from conveyor_server_min.config import OPTIONS, ConfigError, Option, build_config

__all__ = ["main", "parser"]

PROG = "python -m conveyor_server_min"
_HELP = (
    "Run the conveyor_server_min reference server (gRPC + Connect over h2c, HTTP/1.1 and TLS). "
    "The web dashboard is served by `conveyor server`, which takes these options too."
)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one ``error:`` line and exit code 2, like every ``conveyor`` command."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see '{self.prog} --help')", file=sys.stderr)
        sys.exit(2)


def _add(parser: argparse.ArgumentParser, opt: Option) -> None:
    if opt.kind == "bool":
        parser.add_argument(opt.flag, dest=opt.dest, action="store_true", help=opt.help)
    elif opt.kind == "multi":
        parser.add_argument(
            opt.flag, dest=opt.dest, action="append", metavar=opt.metavar or None, help=opt.help
        )
    else:
        metavar = opt.metavar or ("DURATION" if opt.kind == "duration" else "N" if opt.kind == "int" else "")
        parser.add_argument(opt.flag, dest=opt.dest, metavar=metavar or None, help=opt.help)


def parser() -> argparse.ArgumentParser:
    """The argument parser, generated from the option table (values stay text until build_config)."""
    built = _Parser(prog=PROG, description=_HELP, allow_abbrev=False)
    for opt in OPTIONS:
        _add(built, opt)
    return built


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the server until SIGTERM/SIGINT, exit with its code."""
    flags: dict[str, Any] = vars(parser().parse_args(argv))
    try:
        config = build_config(flags)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from conveyor_server_min.server import run

    try:
        code = run(config)
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were installed
        code = 130
    sys.exit(code)
