"""``conveyor worker MODULE:ATTR``: the multi-process worker runtime.

This module only turns flags into a :class:`SupervisorConfig` and an exit code;
the runtime lives in ``conveyor_sdk._runtime``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from conveyor_cli import _common
from conveyor_sdk.durations import parse_duration

if TYPE_CHECKING:
    from conveyor_sdk._runtime.pools import PoolSpec
    from conveyor_sdk._runtime.supervisor import SupervisorConfig
    from conveyor_sdk._worker.registry import HandlerSpec, Registry

EPILOG = (
    "Exit codes: 0 clean stop (drained after SIGTERM/SIGINT); 1 invalid option or queue configuration "
    "(nothing was started); 2 command-line usage error; 3 the app module cannot be imported; 4 the app "
    "attribute is missing or not an App/Registry; 5 child processes cannot load the app or keep dying at "
    "start-up; 6 fatal session error (unauthenticated, permission denied, protocol error); 7 the embedded "
    "server did not start."
)


def fail(message: str, code: int = 1) -> NoReturn:
    """One-line error and exit ``code`` (``_common.fail`` escapes markup: queue patterns contain brackets)."""
    _common.fail(message, code)


def _queues(specs: list[str], app: Iterable[HandlerSpec]) -> dict[str, int]:
    from conveyor_sdk._runtime.pools import parse_queue

    queues: dict[str, int] = {}
    for spec in specs:
        name, weight = parse_queue(spec)
        queues[name] = weight
    if not queues:
        hinted = sorted({s.queue for s in app if s.queue})
        queues = dict.fromkeys(hinted or ["default"], 1)
    return queues


def _validate(
    queue: list[str], pool: list[str], concurrency: int | None, processes: int | None
) -> tuple[list[PoolSpec], int]:
    from conveyor_sdk._runtime.pools import parse_pool, parse_queue

    for spec in queue:
        parse_queue(spec)
    pools = [parse_pool(p) for p in pool]
    if concurrency is not None and concurrency <= 0:
        raise ValueError(f"--concurrency must be > 0, got {concurrency}")
    if processes is not None and processes < 0:
        raise ValueError(f"--processes must be >= 0, got {processes}")
    procs = processes if processes is not None else (os.cpu_count() or 1)
    if procs == 0 and pools:
        raise ValueError("--pool needs --processes >= 1")
    return pools, procs


def register(app: typer.Typer) -> None:
    """Add the ``worker`` command to ``app``."""

    @app.command("worker", epilog=EPILOG, help="Run a worker for an App: supervisor + process pools.")
    def worker(  # noqa: PLR0917 - typer maps each CLI option to one parameter
        app_spec: Annotated[
            str, typer.Argument(metavar="MODULE:ATTR", help="The App, e.g. examples.hello:app.")
        ],
        server: Annotated[
            str | None,
            typer.Option("--server", envvar="CONVEYOR_ADDR", help="Server URL; none = embedded server."),
        ] = None,
        token: Annotated[
            str | None, typer.Option("--token", envvar="CONVEYOR_TOKEN", help="Bearer token.")
        ] = None,
        queue: Annotated[
            list[str],
            typer.Option("-q", "--queue", help="NAME=WEIGHT (repeatable); default: the app's queues."),
        ] = [],  # noqa: B006 - typer needs a literal default for list options
        concurrency: Annotated[
            int | None, typer.Option(help="Total tasks at once (default: two per process, 8 in-process).")
        ] = None,
        processes: Annotated[
            int | None, typer.Option(help="Child processes (default: CPU count; 0 = run in-process).")
        ] = None,
        pool: Annotated[
            list[str], typer.Option("--pool", help="NAME:QUEUES:N explicit pool (repeatable).")
        ] = [],  # noqa: B006 - typer needs a literal default for list options
        grace: Annotated[str, typer.Option(help="Drain grace on SIGTERM.")] = "30s",
        max_tasks_per_child: Annotated[
            int, typer.Option(help="Recycle a child after N tasks (0 = never).")
        ] = 0,
        max_memory_per_child: Annotated[
            int, typer.Option(help="Recycle a child above this RSS in MB (0 = never).")
        ] = 0,
        reload: Annotated[
            bool, typer.Option("--reload", help="Reload on .py changes (development).")
        ] = False,
        metrics_port: Annotated[
            int | None, typer.Option(help="Serve Prometheus /metrics, /healthz and /readyz on this port.")
        ] = None,
        metrics_host: Annotated[
            str, typer.Option(help="Address for --metrics-port (0.0.0.0 for Kubernetes probes).")
        ] = "127.0.0.1",
        log_format: Annotated[str, typer.Option(help="text or json.")] = "text",
        demo: Annotated[
            bool, typer.Option("--demo", help="Run the app module's demo(client) producer.")
        ] = False,
    ) -> None:
        code = run_worker_command(
            app_spec,
            server=server,
            token=token,
            queue=queue,
            concurrency=concurrency,
            processes=processes,
            pool=pool,
            grace=grace,
            max_tasks_per_child=max_tasks_per_child,
            max_memory_per_child=max_memory_per_child,
            reload=reload,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            log_format=log_format,
            demo=demo,
        )
        raise typer.Exit(code)


def run_worker_command(
    app_spec: str,
    *,
    server: str | None,
    token: str | None,
    queue: list[str],
    concurrency: int | None,
    processes: int | None,
    pool: list[str],
    grace: str,
    max_tasks_per_child: int,
    max_memory_per_child: int,
    reload: bool,
    metrics_port: int | None,
    log_format: str,
    demo: bool,
    metrics_host: str = "127.0.0.1",
) -> int:
    """Validate, load the app, start the runtime; returns the exit code."""
    from conveyor_sdk._runtime.supervisor import SupervisorConfig

    if log_format not in ("text", "json"):
        fail(f"--log-format must be text or json, got {log_format!r}")
    try:
        pools, procs = _validate(queue, pool, concurrency, processes)
        grace_s = parse_duration(grace)
        if max_tasks_per_child < 0 or max_memory_per_child < 0:
            raise ValueError("--max-tasks-per-child and --max-memory-per-child must be >= 0")
    except ValueError as exc:
        fail(str(exc))
    registry = _load(app_spec, log_format)
    try:
        queues = _queues(queue, registry)
    except ValueError as exc:
        fail(str(exc))
    for spec in pools:
        for name in spec.queues:
            queues.setdefault(name, 1)
    config = SupervisorConfig(
        app=app_spec,
        queues=queues,
        concurrency=concurrency or (2 * procs if procs > 0 else 8),
        processes=procs,
        server=server,
        token=token,
        pools=tuple(pools),
        grace=grace_s,
        max_tasks_per_child=max_tasks_per_child,
        max_memory_mb=max_memory_per_child,
        reload=reload,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        log_format=log_format,
        demo=demo,
        live=sys.stderr.isatty() and log_format == "text",
    )
    return _serve(config, registry)


def _load(app_spec: str, log_format: str) -> Registry:
    """Configure logging and import the app (exit 3/4 on failure)."""
    from conveyor_sdk._runtime.appload import AppLoadError, load_app
    from conveyor_sdk._runtime.logs import configure_logging

    configure_logging(log_format)
    try:
        return load_app(app_spec)
    except AppLoadError as exc:
        fail(exc.message, exc.exit_code)


def _serve(config: SupervisorConfig, registry: Registry) -> int:
    """Spawn children and the embedded server, run the loop, clean up; returns the exit code."""
    from conveyor_sdk._runtime.embedded import EmbeddedServerError
    from conveyor_sdk._runtime.supervisor import EXIT_SERVER, Supervisor

    module = sys.modules.get(config.app.partition(":")[0])
    sup = Supervisor(config, registry, getattr(module, "__file__", None))
    try:
        try:
            sup.prepare()
        except EmbeddedServerError as exc:
            fail(str(exc), EXIT_SERVER)
        return asyncio.run(sup.run())
    finally:
        sup.shutdown()
