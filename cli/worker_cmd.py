"""``conveyor worker MODULE:ATTR``: the multi-process worker runtime.

This module only turns flags into a :class:`SupervisorConfig` and an exit code;
the runtime lives in ``conveyor_sdk._runtime``.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

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
    "start-up; 6 fatal session error (unauthenticated, permission denied, protocol error, a server "
    "certificate that does not verify); 7 the embedded "
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


MAX_PROCESSES = 1024
MAX_CONCURRENCY = 100_000


def _in_range(flag: str, value: int | None, low: int, high: int | None = None) -> None:
    if value is None:
        return
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{flag} must be {bounds}, got {value}")


def _validate(
    queue: list[str], pool: list[str], concurrency: int | None, processes: int | None
) -> tuple[list[PoolSpec], int]:
    from conveyor_sdk._runtime.cpus import available_cpus
    from conveyor_sdk._runtime.pools import parse_pool, parse_queue

    for spec in queue:
        parse_queue(spec)
    pools = [parse_pool(p) for p in pool]
    _in_range("--concurrency", concurrency, 1, MAX_CONCURRENCY)
    _in_range("--processes", processes, 0, MAX_PROCESSES)
    procs = processes if processes is not None else available_cpus()
    if procs == 0 and pools:
        raise ValueError("--pool needs --processes >= 1")
    return pools, procs


def _check_metrics_port(host: str, port: int | None) -> None:
    """Fail early (before any child starts) when the metrics port cannot be served."""
    _in_range("--metrics-port", port, 0, 65535)
    if not port:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the metrics server will
        try:
            probe.bind((host, port))
        except OSError as exc:
            why = exc.strerror or exc
            raise ValueError(f"--metrics-port {port}: cannot listen on {host}:{port}: {why}") from None


def register(app: typer.Typer) -> None:
    """Add the ``worker`` command to ``app``."""

    @app.command("worker", epilog=EPILOG, help="Run a worker for an App: supervisor + process pools.")
    def worker(  # noqa: PLR0917 - typer maps each CLI option to one parameter
        app_spec: Annotated[
            str, typer.Argument(metavar="MODULE:ATTR", help="The App, e.g. examples.hello:app.")
        ],
        server: Annotated[
            str | None,
            typer.Option(
                "--server",
                envvar="CONVEYOR_ADDR",
                help="Server URL, or several comma-separated (a cluster's nodes); none = embedded server.",
            ),
        ] = None,
        reconnect_base: Annotated[
            str,
            typer.Option(envvar="CONVEYOR_RECONNECT_BASE", help="Reconnect backoff base, e.g. 500ms."),
        ] = "500ms",
        reconnect_max: Annotated[
            str,
            typer.Option(envvar="CONVEYOR_RECONNECT_MAX", help="Reconnect backoff cap, e.g. 30s."),
        ] = "30s",
        keepalive_interval: Annotated[
            str,
            typer.Option(
                envvar="CONVEYOR_KEEPALIVE_INTERVAL", help="HTTP/2 PING to the server every D, e.g. 5s."
            ),
        ] = "5s",
        keepalive_timeout: Annotated[
            str,
            typer.Option(
                envvar="CONVEYOR_KEEPALIVE_TIMEOUT",
                help="A PING unanswered (or a write stuck) this long ends the session; it reconnects.",
            ),
        ] = "10s",
        token: Annotated[
            str | None, typer.Option("--token", envvar="CONVEYOR_TOKEN", help="Bearer token.")
        ] = None,
        ca_file: Annotated[
            str | None,
            typer.Option(
                "--ca-file",
                envvar="CONVEYOR_CA_FILE",
                metavar="PEM",
                help="CA bundle that verifies an https:// server (default: the system trust store).",
            ),
        ] = None,
        queue: Annotated[
            list[str],
            typer.Option(
                "-q",
                "--queue",
                envvar="CONVEYOR_QUEUES",
                help="NAME=WEIGHT (repeatable; the variable: space separated); default: the app's queues.",
            ),
        ] = [],  # noqa: B006 - typer needs a literal default for list options
        concurrency: Annotated[
            int | None,
            typer.Option(
                envvar="CONVEYOR_CONCURRENCY",
                help="Tasks at once, 1..100000 (default: 64 per process, and in-process, when every handler "
                "is async; 8 per process when any is sync).",
            ),
        ] = None,
        processes: Annotated[
            int | None,
            typer.Option(
                envvar="CONVEYOR_PROCESSES",
                help="Child processes, 0..1024 (default: the CPUs this process may use: affinity and cgroup "
                "quota; 0 = in-process).",
            ),
        ] = None,
        pool: Annotated[
            list[str],
            typer.Option(
                "--pool",
                envvar="CONVEYOR_POOLS",
                help="NAME:QUEUES:N explicit pool (repeatable; space separated).",
            ),
        ] = [],  # noqa: B006 - typer needs a literal default for list options
        grace: Annotated[str, typer.Option(envvar="CONVEYOR_GRACE", help="Drain grace on SIGTERM.")] = "30s",
        max_tasks_per_child: Annotated[
            int,
            typer.Option(
                envvar="CONVEYOR_MAX_TASKS_PER_CHILD", help="Recycle a child after N tasks (0 = never)."
            ),
        ] = 0,
        max_memory_per_child: Annotated[
            int,
            typer.Option(
                envvar="CONVEYOR_MAX_MEMORY_PER_CHILD",
                help="Recycle a child above this RSS in MB (0 = never).",
            ),
        ] = 0,
        reload: Annotated[
            bool,
            typer.Option("--reload", envvar="CONVEYOR_RELOAD", help="Reload on .py changes (development)."),
        ] = False,
        metrics_port: Annotated[
            int | None,
            typer.Option(
                envvar="CONVEYOR_METRICS_PORT",
                help="Serve Prometheus /metrics, /healthz and /readyz on this port (0..65535).",
            ),
        ] = None,
        metrics_host: Annotated[
            str,
            typer.Option(
                envvar="CONVEYOR_METRICS_HOST",
                help="Address for --metrics-port (0.0.0.0 for Kubernetes probes).",
            ),
        ] = "127.0.0.1",
        log_format: Annotated[str, typer.Option(envvar="CONVEYOR_LOG_FORMAT", help="text or json.")] = "text",
        log_level: Annotated[
            str,
            typer.Option(
                envvar="CONVEYOR_LOG_LEVEL",
                help="debug, info, warning or error (hpack/h2 stay at info unless named in "
                "CONVEYOR_DEBUG_LOGGERS).",
            ),
        ] = "info",
        task_log: Annotated[
            bool,
            typer.Option(
                "--task-log/--no-task-log",
                envvar="CONVEYOR_TASK_LOG",
                help="One INFO line per finished task; off for very high rates (failures are always logged).",
            ),
        ] = True,
        demo: Annotated[
            bool,
            typer.Option(
                "--demo", envvar="CONVEYOR_DEMO", help="Run the app module's demo(client) producer."
            ),
        ] = False,
        key_file: Annotated[
            str | None,
            typer.Option(
                "--key-file",
                help="Payload decryption keys, one <id>:<base64-secret> per line (first = active); "
                "default: the app's own, else $CONVEYOR_ENCRYPTION_KEY_FILE / $CONVEYOR_ENCRYPTION_KEY.",
            ),
        ] = None,
        embedded_db: Annotated[
            str | None,
            typer.Option(
                "--embedded-db",
                envvar="CONVEYOR_EMBEDDED_DB",
                metavar="PATH",
                help="Keep the embedded server's tasks in this SQLite file (survives restarts).",
            ),
        ] = None,
        loop: Annotated[
            str,
            typer.Option(
                "--loop",
                envvar="CONVEYOR_LOOP",
                help="Event loop of the supervisor and its children: auto (uvloop when installed), "
                "asyncio or uvloop.",
            ),
        ] = "auto",
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
            log_level=log_level,
            demo=demo,
            key_file=key_file,
            embedded_db=embedded_db,
            loop=loop,
            task_log=task_log,
            ca_file=ca_file,
            reconnect=(reconnect_base, reconnect_max),
            keepalive=(keepalive_interval, keepalive_timeout),
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
    key_file: str | None = None,
    embedded_db: str | None = None,
    log_level: str = "info",
    metrics_host: str = "127.0.0.1",
    loop: str = "auto",
    task_log: bool = True,
    ca_file: str | None = None,
    reconnect: tuple[str, str] = ("500ms", "30s"),
    keepalive: tuple[str, str] = ("5s", "10s"),
) -> int:
    """Validate, load the app, start the runtime; returns the exit code."""
    from conveyor_cli._demo import demo_producer
    from conveyor_sdk._runtime.logs import parse_level
    from conveyor_sdk._runtime.rss import check_memory_limit
    from conveyor_sdk._runtime.supervisor import SupervisorConfig
    from conveyor_sdk._transport import eventloop
    from conveyor_sdk._worker.defaults import default_concurrency
    from conveyor_sdk.errors import InvalidArgument

    if log_format not in ("text", "json"):
        fail(f"--log-format must be text or json, got {log_format!r}")
    if embedded_db and server:
        fail("--embedded-db configures the embedded server; it cannot be combined with --server")
    try:
        level = parse_level(log_level)
        pools, procs = _validate(queue, pool, concurrency, processes)
        grace_s = parse_duration(grace)
        if grace_s < 0:
            raise ValueError(f"--grace must be >= 0, got {grace}")
        _in_range("--max-tasks-per-child", max_tasks_per_child, 0)
        _in_range("--max-memory-per-child", max_memory_per_child, 0)
        check_memory_limit(max_memory_per_child)
        _check_metrics_port(metrics_host, metrics_port)
        eventloop.resolve(loop)
        backoff = _reconnect_options(server, reconnect)
        pings = _keepalive_options(keepalive)
        if not server:
            from conveyor_sdk._runtime.embedded import preferred_port

            preferred_port()
    except (ValueError, InvalidArgument) as exc:
        fail(str(exc))
    registry = _load(app_spec, log_format, level)
    try:
        queues = _queues(queue, registry)
        encryption = _encryption(key_file, registry)
    except ValueError as exc:
        fail(str(exc))
    for spec in pools:
        for name in spec.queues:
            queues.setdefault(name, 1)
    config = SupervisorConfig(
        app=app_spec,
        queues=queues,
        concurrency=concurrency or default_concurrency(registry, procs),
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
        log_level=log_level.lower(),
        demo=demo_producer(app_spec, token) if demo else None,
        live=sys.stderr.isatty() and log_format == "text",
        encryption=encryption,
        embedded_db=embedded_db or None,
        embedded_command=(sys.executable, "-m", "conveyor_cli.server_cmd"),  # `conveyor server`: + dashboard
        loop=loop,
        task_log=task_log,
        ca_file=ca_file,
        reconnect_base=backoff[0],
        reconnect_max=backoff[1],
        keepalive_interval=pings[0],
        keepalive_timeout=pings[1],
    )
    return _serve(config, registry)


def _encryption(key_file: str | None, registry: Registry) -> Any:
    """Keys that open sealed payloads: --key-file, else the app's own, else the environment."""
    import logging

    from conveyor_sdk.encryption import load_keyring

    log = logging.getLogger("conveyor.runtime")
    if key_file is None and getattr(registry, "encryption", None) is not None:
        log.info("payload encryption: the app's own encryptor")
        return None  # the Worker falls back to the app's
    ring = load_keyring(key_file)
    if ring is not None:
        log.info("payload encryption: keys %s (active %s)", list(ring.key_ids), ring.active_key_id)
    return ring


def _load(app_spec: str, log_format: str, level: int) -> Registry:
    """Configure logging and import the app (exit 3/4 on failure).

    An exception raised by the user's module shows its traceback (the user's frames
    only, no import machinery) before the one ``error:`` line.
    """
    from conveyor_sdk._runtime.appload import AppLoadError, load_app
    from conveyor_sdk._runtime.logs import configure_logging

    configure_logging(log_format, level=level)
    try:
        return load_app(app_spec)
    except AppLoadError as exc:
        if exc.detail:
            sys.stderr.write(exc.detail if exc.detail.endswith("\n") else exc.detail + "\n")
        fail(exc.message, exc.exit_code)


def _announce(url: str, log_format: str) -> None:
    """One line to paste into a second terminal so operator commands reach the embedded server."""
    line = f"export CONVEYOR_ADDR={url}"
    if log_format == "json":
        import logging

        logging.getLogger("conveyor.runtime").info("%s", line, extra={"export": line})
    else:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _serve(config: SupervisorConfig, registry: Registry) -> int:
    """Spawn children and the embedded server, run the loop, clean up; returns the exit code."""
    from conveyor_sdk._runtime.embedded import EmbeddedServerError
    from conveyor_sdk._runtime.supervisor import EXIT_CONFIG, EXIT_SERVER, MetricsUnavailable, Supervisor
    from conveyor_sdk._transport import eventloop

    module = sys.modules.get(config.app.partition(":")[0])
    sup = Supervisor(config, registry, getattr(module, "__file__", None))
    try:
        try:
            sup.prepare()
        except EmbeddedServerError as exc:
            fail(str(exc), EXIT_SERVER)
        if sup.embedded is not None:
            _announce(sup.server_url, config.log_format)
        try:
            return eventloop.run(sup.run(), config.loop)
        except MetricsUnavailable as exc:
            fail(str(exc), EXIT_CONFIG)
    finally:
        sup.shutdown()


def _reconnect_options(server: str | None, reconnect: tuple[str, str]) -> tuple[float, float]:
    """--server's addresses and --reconnect-base/--reconnect-max, checked before anything starts."""
    from conveyor_sdk._protocol.backoff import Backoff, parse_addresses

    if server:
        parse_addresses(server, what="--server")
    try:
        base, cap = (parse_duration(v) for v in reconnect)
    except ValueError as exc:
        raise ValueError(f"--reconnect-base/--reconnect-max: {exc}") from None
    Backoff(base=base, cap=cap)  # SettingError (a ValueError) names the bad one
    return base, cap


def _keepalive_options(keepalive: tuple[str, str]) -> tuple[float, float]:
    """--keepalive-interval/--keepalive-timeout as seconds, both > 0, checked before anything starts."""
    from conveyor_sdk._transport.keepalive import KeepaliveOptions

    try:
        interval, timeout = (parse_duration(v) for v in keepalive)
        KeepaliveOptions(interval, timeout)
    except ValueError as exc:
        raise ValueError(f"--keepalive-interval/--keepalive-timeout: {exc}") from None
    return interval, timeout
