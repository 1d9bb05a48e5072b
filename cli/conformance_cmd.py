"""``conveyor conformance``: run the executable conveyor.v1 conformance suite.

``run`` prints a table (check id, protocol section, result, known divergence,
detail) after a progress bar and exits 0 only when no selected check failed.
``worker`` is our SDK's program for the cross-SDK environment contract.
``list`` shows every check id with its section and description.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Annotated

import typer

from conveyor_cli._common import TokenOpt, err_console, fail

if TYPE_CHECKING:
    from conveyor_conformance.context import SuiteConfig
    from conveyor_conformance.model import Check, CheckResult

conformance = typer.Typer(help="Run the conveyor.v1 conformance suite.", no_args_is_help=True)

ServerUrlOpt = Annotated[
    str | None,
    typer.Option("--server", help="Server under test; omitted = start conveyor_server_min itself."),
]
WorkerCmdOpt = Annotated[
    str | None,
    typer.Option(
        "--worker-cmd",
        help="Worker program for worker.* checks (default: conveyor conformance worker).",
    ),
]
DeclaresOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--worker-declares",
        help=(
            "Extensions the worker program supports (comma-separated or repeated; 'none' for none), "
            "instead of the line it prints: CONCURRENCY, CONVEYOR_TOKEN, DRAIN_GRACE_S, "
            "conformance:cancellable, conformance:fail, conformance:skip, conformance:json."
        ),
    ),
]
OnlyOpt = Annotated[
    list[str] | None,
    typer.Option("--only", help="Check id, id prefix (e.g. server.5.6) or glob; repeatable."),
]
ProfileOpt = Annotated[
    str,
    typer.Option("--profile", help="strict, or upstream (known conveyord divergences reported separately)."),
]


def register(app: typer.Typer) -> None:
    """Add the ``conformance`` group to ``app``."""
    app.add_typer(conformance, name="conformance")


@conformance.command("run", help="Run the suite against a server and a worker program.")
def run(  # noqa: PLR0917  # typer maps each option to one parameter
    server: ServerUrlOpt = None,
    token: TokenOpt = None,
    worker_cmd: WorkerCmdOpt = None,
    worker_declares: DeclaresOpt = None,
    only: OnlyOpt = None,
    profile: ProfileOpt = "strict",
    json_file: Annotated[str | None, typer.Option("--json", help="Write a JSON report here.")] = None,
    junit_file: Annotated[str | None, typer.Option("--junit", help="Write a JUnit XML report here.")] = None,
    protocol: Annotated[str, typer.Option("--protocol", help="Session protocol for server checks.")] = "grpc",
    concurrency: Annotated[int, typer.Option("--concurrency", help="Checks run at once.", min=1)] = 6,
    timing_scale: Annotated[
        float,
        typer.Option("--timing-scale", help="Stretch waits on slow machines (0.1..100).", min=0.1, max=100),
    ] = 1.0,
    ca_file: Annotated[
        str | None,
        typer.Option(
            "--ca-file",
            envvar="CONVEYOR_CA_FILE",
            help="PEM bundle that verifies an https:// --server (also given to the worker program as "
            "CONVEYOR_CA_FILE).",
        ),
    ] = None,
) -> None:
    from conveyor_conformance.context import SuiteConfig

    if profile not in ("strict", "upstream"):
        fail(f"--profile must be strict or upstream, not {profile!r}", 2)
    if protocol not in ("grpc", "connect"):
        fail(f"--protocol must be grpc or connect, not {protocol!r}", 2)
    declares = _declares(worker_declares)
    config = SuiteConfig(
        server=server,
        token=token,
        worker_cmd=worker_cmd,
        only=tuple(only or ()),
        profile=profile,
        protocol=protocol,
        concurrency=concurrency,
        timing_scale=timing_scale,
        declares=declares,
        ca_file=_readable(ca_file),
    )
    ok = _run_and_report(config, json_file, junit_file)
    raise typer.Exit(0 if ok else 1)


def _readable(ca_file: str | None) -> str | None:
    if ca_file and not os.path.isfile(ca_file):
        fail(f"--ca-file: no such file {ca_file!r}", 2)
    return ca_file or None


def _declares(values: list[str] | None) -> tuple[str, ...] | None:
    """``--worker-declares`` values as names (None when not given); unknown names are a usage error."""
    if values is None:
        return None
    from conveyor_conformance.declare import EXTENSIONS, parse_names

    names = parse_names(",".join(values))
    unknown = sorted(n for n in names if n not in EXTENSIONS)
    if unknown:
        known = ", ".join(EXTENSIONS)
        fail(f"--worker-declares: unknown extension(s) {', '.join(unknown)}; known: {known}", 2)
    return tuple(sorted(names))


def _run_and_report(config: SuiteConfig, json_file: str | None, junit_file: str | None) -> bool:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from conveyor_conformance import report
    from conveyor_conformance.harness import run_suite

    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task("starting", total=None)

        def started(checks: list[Check]) -> None:
            progress.update(bar, total=len(checks), description="conformance")

        def finished(result: CheckResult) -> None:
            progress.update(bar, advance=1, description=f"{result.id}")

        try:
            summary = asyncio.run(run_suite(config, on_start=started, on_result=finished))
        except ValueError as exc:  # e.g. --only matching nothing
            fail(str(exc), 2)
        except RuntimeError as exc:  # server failed to start
            fail(str(exc).splitlines()[0], 2)
    report.render_table(summary, console)
    if json_file:
        report.write_json(summary, json_file)
    if junit_file:
        report.write_junit(summary, junit_file)
    return summary.ok


@conformance.command("list", help="List every check with its protocol section.")
def list_checks(only: OnlyOpt = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from conveyor_conformance.registry import default_registry

    try:
        checks = default_registry().select(only or ())
    except ValueError as exc:
        fail(str(exc), 2)
    table = Table(title=f"{len(checks)} checks")
    for name in ("check", "§", "description", "known upstream divergence"):
        table.add_column(name)
    for c in checks:
        table.add_row(c.id, c.section, escape(c.description), escape(c.divergence))
    Console().print(table)


@conformance.command("worker", help="Our worker program for the cross-SDK environment contract.")
def worker() -> None:
    from conveyor_conformance.worker_program import main

    try:
        code = main()
    except KeyError as exc:
        err_console.print(f"error: missing environment variable {exc}")
        code = 2
    raise typer.Exit(code)
