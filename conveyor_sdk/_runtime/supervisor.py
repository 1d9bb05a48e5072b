"""The supervisor: one session (the worker core's Worker) per pool + a ProcessExecutor + signals.

Order of start-up (why: children are plain ``fork+exec`` interpreters, but we still
start them before anything else so no connection or thread exists when they fork):

1. import the app in the supervisor (the Worker needs its types and batch types);
2. spawn every child (they import the app and announce ``Ready``);
3. start the embedded server when no ``--server`` was given;
4. run the event loop: metrics endpoint, live view / logs, reload watcher, the
   demo producer, and one Worker per pool, each with that pool's queues, weights
   and capacity (processes x slots per child) and ``executor=`` the pool's view of
   the process executor. A backlog on one pool's queues therefore never holds the
   session credits another pool's queues need.

Signals: SIGTERM/SIGINT -> drain every session (finish or release in-flight tasks
within ``--grace``, heartbeats continue); a second one -> fast release and exit.
SIGHUP -> graceful reload (fresh children take new work, old ones finish theirs).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from conveyor_sdk._runtime.embedded import EmbeddedServer
from conveyor_sdk._runtime.executor import ExecutorOptions, ProcessExecutor, RuntimeFailure
from conveyor_sdk._runtime.health import HealthInputs, liveness, readiness
from conveyor_sdk._runtime.metrics import Metrics, MetricsServer
from conveyor_sdk._runtime.observe import ObservedExecutor
from conveyor_sdk._runtime.pools import DEFAULT_POOL, PoolSpec, plan_pools
from conveyor_sdk._runtime.proc import ChildArgs
from conveyor_sdk._runtime.reload import app_directory, discard_snapshot, watch
from conveyor_sdk._transport import eventloop
from conveyor_sdk._transport.options import TLSOptions
from conveyor_sdk._worker.registry import Registry
from conveyor_sdk.errors import ConveyorError

__all__ = [
    "EXIT_CHILDREN",
    "EXIT_CONFIG",
    "EXIT_OK",
    "EXIT_SERVER",
    "EXIT_SESSION",
    "MetricsUnavailable",
    "Supervisor",
    "SupervisorConfig",
]

log = logging.getLogger("conveyor.runtime")

EXIT_OK = 0
EXIT_CONFIG = 1
EXIT_CHILDREN = 5  # children cannot load the app / keep dying at start-up
EXIT_SESSION = 6  # fatal session error (unauthenticated, permission denied, protocol error)
EXIT_SERVER = 7  # the embedded server did not start


class MetricsUnavailable(Exception):
    """The metrics endpoint cannot listen (``conveyor worker`` exits 1 with this message)."""


@dataclass(frozen=True, slots=True)
class SupervisorConfig:
    """Everything ``conveyor worker`` decided from its flags."""

    app: str
    queues: dict[str, int]
    concurrency: int
    processes: int
    server: str | None = None
    token: str | None = None
    pools: tuple[PoolSpec, ...] = ()
    grace: float = 30.0
    max_tasks_per_child: int = 0
    max_memory_mb: int = 0
    reload: bool = False
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    log_format: str = "text"
    log_level: str = "info"
    # --demo: the producer, called with the server URL once the worker runs. The CLI builds it, so the
    # runtime never imports a client (CONTRIBUTING.md, "Layers").
    demo: Callable[[str], Awaitable[None]] | None = None
    live: bool = False
    kill_grace: float = 2.0
    hung_after: float = 10.0
    beat: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)
    encryption: Any = None  # opens sealed payloads here, in the supervisor (children get plaintext)
    embedded_db: str | None = None  # SQLite file for the embedded server (--embedded-db)
    # The embedded server's argv before its flags; () = the bare server. The CLI names its own
    # `conveyor server` (with the dashboard): the runtime never names the CLI.
    embedded_command: tuple[str, ...] = ()
    loop: str = "auto"  # event loop of the supervisor and its children: auto | asyncio | uvloop
    task_log: bool = True  # one INFO line per finished task (--no-task-log turns it off)
    ca_file: str | None = None  # PEM bundle that verifies an https:// server (--ca-file)
    reconnect_base: float = 0.5  # §5.9 backoff base per full round of --server addresses
    reconnect_max: float = 30.0  # and its cap (--reconnect-base / --reconnect-max)
    keepalive_interval: float = 5.0  # HTTP/2 PING period of every session (--keepalive-interval)
    keepalive_timeout: float = 10.0  # PING answer / stuck write limit (--keepalive-timeout)


class Supervisor:
    """Runs the whole worker runtime; :meth:`run` returns the process exit code."""

    def __init__(self, config: SupervisorConfig, registry: Registry, module_file: str | None = None) -> None:
        self.config = config
        self.registry = registry
        self.module_file = module_file
        # In process mode the children say which types they registered; in-process, this registry.
        self.metrics = Metrics(types=registry.types if config.processes == 0 else None)
        self.executor: ProcessExecutor | None = None
        self.embedded: EmbeddedServer | None = None
        self.server_url = config.server or ""
        self.workers: dict[str, Any] = {}  # pool name -> its Worker (session)
        self.exit_code = EXIT_OK
        self._signals = 0
        self._stopped: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[Any]] = []

    def __repr__(self) -> str:
        mode = f"{self.config.processes} processes" if self.executor is not None else "in-process"
        return f"<Supervisor {self.config.app} -> {self.server_url or '?'} {mode} exit_code={self.exit_code}>"

    def statistics(self) -> dict[str, Any]:
        """Snapshot: executor children, task counters, worker session counters."""
        stats: dict[str, Any] = {
            "server": self.server_url,
            "tasks_per_second": self.metrics.rate(),
            "failures": self.metrics.failures,
            "restarts": dict(self.metrics.restarts),
        }
        if self.executor is not None:
            stats["executor"] = self.executor.statistics()
        stats["sessions"] = {name: w.statistics() for name, w in self.workers.items()}
        return stats

    def in_flight(self) -> dict[str, tuple[int, int]]:
        """Queue -> (running, parked) tasks over every session: what the server counts in flight."""
        totals: dict[str, tuple[int, int]] = {}
        for worker in self.workers.values():
            for queue, (running, parked) in worker.in_flight_by_queue().items():
                r, p = totals.get(queue, (0, 0))
                totals[queue] = (r + running, p + parked)
        return totals

    # -- synchronous preparation (before the loop, threads or sockets) ----------------
    def prepare(self) -> None:
        """Spawn children, then the embedded server. Raises EmbeddedServerError.

        A SIGTERM/SIGINT from here on is never the default (instant death with children and the
        embedded server orphaned): it is counted and :meth:`run` drains (once) or stops (twice)
        as soon as its workers exist.
        """
        self._catch_early_signals()
        cfg = self.config
        if cfg.processes > 0:
            per_child = max(1, -(-cfg.concurrency // cfg.processes))
            pools = plan_pools(cfg.processes, list(cfg.queues), cfg.pools)
            options = ExecutorOptions(
                kill_grace=cfg.kill_grace,
                hung_after=cfg.hung_after,
                max_tasks_per_child=cfg.max_tasks_per_child,
                max_memory_mb=cfg.max_memory_mb,
                weights=tuple(cfg.queues.items()),
            )
            args = ChildArgs(
                app=cfg.app,
                capacity=per_child,
                beat=cfg.beat,
                log_format=cfg.log_format,
                forward_stderr=cfg.live,
                log_level=cfg.log_level,
                loop=eventloop.resolve(cfg.loop),
                source_root=str(app_directory(self.module_file)) if self.module_file else "",
            )
            self.executor = ProcessExecutor(args, pools, options, self.metrics)
            self.executor.spawn()
            log.info(
                "started %d child processes (%s), %d slots each, event loop %s",
                sum(p.processes for p in pools),
                ", ".join(f"{p.name}: {'+'.join(p.queues)} x{p.processes}" for p in pools),
                per_child,
                args.loop,
            )
        if not cfg.server:
            db = ("--db", cfg.embedded_db) if cfg.embedded_db else ()
            self.embedded = EmbeddedServer((*db, "--loop", cfg.loop), command=cfg.embedded_command)
            self.server_url = self.embedded.start()
            log.info("embedded server listening on %s", self.server_url)
            if self.embedded.dashboard_url:
                log.info("dashboard on %s", self.embedded.dashboard_url)

    def _catch_early_signals(self) -> None:
        def early(signum: int, _frame: object) -> None:
            self._signals += 1
            log.info("%s during start-up: stopping once started", signal.Signals(signum).name)

        try:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, early)
        except ValueError:  # not the main thread: an embedding program owns the signals
            pass

    # -- the loop ----------------------------------------------------------------------
    async def run(self) -> int:
        """Serve until drained or failed; returns the exit code."""
        self._stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_stop_signal, sig)
        loop.add_signal_handler(signal.SIGHUP, self._on_reload_signal)
        if self.executor is not None:
            self.executor.on_failure = self._on_runtime_failure
        metrics_server = await self._start_metrics()
        try:
            self.workers = self._make_workers()
            if self._signals:  # asked to stop during start-up, before there was a worker to stop
                self._stop_worker(fast=self._signals > 1)
            self._start_side_tasks()
            await self._run_workers()
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self.executor is not None:
                await self.executor.close(0)
            if metrics_server is not None:
                await metrics_server.close()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
        return self.exit_code

    def shutdown(self) -> None:
        """After the loop: kill any child still alive, stop the embedded server."""
        if self.executor is not None:
            for child in self.executor.children():
                if child.popen is not None and child.popen.poll() is None:
                    child.popen.kill()
                    child.popen.wait(5)
            discard_snapshot(self.executor.good_code)
        if self.embedded is not None:
            self.embedded.stop()

    def _make_workers(self) -> dict[str, Any]:
        """One Worker per pool: its queues and weights, concurrency = the pool's capacity."""
        from conveyor_sdk._worker.local import LocalExecutor
        from conveyor_sdk._worker.runner import Worker

        cfg = self.config
        if self.executor is None:  # --processes 0: one in-process session for every queue
            local = LocalExecutor(self.registry, threads=cfg.concurrency)
            worker = Worker(
                self.server_url,
                queues=dict(cfg.queues),
                concurrency=cfg.concurrency,
                token=cfg.token,
                grace=cfg.grace,
                task_log=cfg.task_log,
                reconnect_base=cfg.reconnect_base,
                reconnect_max=cfg.reconnect_max,
                keepalive_interval=cfg.keepalive_interval,
                keepalive_timeout=cfg.keepalive_timeout,
                tls=TLSOptions(ca_file=cfg.ca_file) if cfg.ca_file else None,
                executor=ObservedExecutor(local, self.metrics),  # the per-task families, as children's
                encryption=cfg.encryption,
            )
            return {DEFAULT_POOL: worker}
        workers: dict[str, Any] = {}
        for name, pool in self.executor.pools.items():
            workers[name] = Worker(
                self.server_url,
                queues=dict(pool.weights),
                concurrency=pool.capacity,
                token=cfg.token,
                grace=cfg.grace,
                task_log=cfg.task_log,
                reconnect_base=cfg.reconnect_base,
                reconnect_max=cfg.reconnect_max,
                keepalive_interval=cfg.keepalive_interval,
                keepalive_timeout=cfg.keepalive_timeout,
                tls=TLSOptions(ca_file=cfg.ca_file) if cfg.ca_file else None,
                executor=self.executor.for_pool(name),
                labels={"pool": name},
                encryption=cfg.encryption,
            )
        return workers

    async def _run_workers(self) -> None:
        """Run every session; when one ends on its own (fatal error), the others drain too."""
        runs = {
            asyncio.create_task(worker.run(self.registry), name=f"conveyor-session-{name}"): name
            for name, worker in self.workers.items()
        }
        pending = set(runs)
        unexpected: list[BaseException] = []
        stopped_others = False
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception()
                if exc is not None and not self._session_failed(runs[task], exc):
                    unexpected.append(exc)
            if pending and not stopped_others and (unexpected or self.exit_code != EXIT_OK):
                stopped_others = True  # once: a second stop would turn the drain into a release
                self._stop_worker(fast=bool(unexpected))
        if unexpected:
            raise unexpected[0]

    def _session_failed(self, pool: str, exc: BaseException) -> bool:
        """Record a session's failure as the exit code; False for an unexpected exception."""
        if isinstance(exc, RuntimeFailure):
            if self.exit_code != EXIT_CHILDREN:
                log.error("%s", exc)
            self.exit_code = EXIT_CHILDREN
            return True
        if isinstance(exc, ConveyorError):
            log.error("session of pool %s failed: %s: %s", pool, exc.code.connect_name, exc.message)
            if self.exit_code == EXIT_OK:
                self.exit_code = EXIT_SESSION
            return True
        return False

    def _start_side_tasks(self) -> None:
        cfg = self.config
        if cfg.reload and self.executor is not None:
            root = app_directory(self.module_file)
            self._spawn(watch(root, self._reload_for_files))
        if cfg.demo is not None:
            self._spawn(cfg.demo(self.server_url))
        if cfg.live:
            from conveyor_sdk._runtime.live import run_live

            self._spawn(run_live(self))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:  # isolation point: a side task never takes the worker down
                log.exception("background task failed")

        self._tasks.append(asyncio.create_task(guarded()))

    async def _reload_for_files(self, files: list[str]) -> None:
        await self.reload()

    async def reload(self) -> None:
        """Graceful reload: fresh children first, then retire the old ones."""
        if self.executor is None:
            log.warning("reload needs --processes >= 1; ignored")
            return
        await self.executor.reload()

    async def _start_metrics(self) -> MetricsServer | None:
        if self.config.metrics_port is None:
            return None
        server = MetricsServer(
            self._metrics_text,
            self._health,
            ready=self._ready,
            host=self.config.metrics_host,
            port=self.config.metrics_port,
        )
        try:
            port = await server.start()
        except OSError as exc:  # lost a race for the port after the CLI checked it
            where = f"{self.config.metrics_host}:{self.config.metrics_port}"
            why = exc.strerror or exc
            raise MetricsUnavailable(f"--metrics-port: cannot listen on {where}: {why}") from None
        log.info(
            "metrics listening on http://%s:%d (/metrics, /healthz, /readyz)", self.config.metrics_host, port
        )
        return server

    def _metrics_text(self) -> str:
        return self.metrics.render_for(self)

    def _children_alive(self) -> int:
        if self.executor is None:
            return 0
        return sum(1 for c in self.executor.children() if c.state.value in ("ready", "retiring"))

    def health_inputs(self) -> HealthInputs:
        """Local state for /healthz and /readyz (no server round trip)."""
        sessions = {name: w.phase for name, w in self.workers.items()}
        errors = {name: w.last_session_error for name, w in self.workers.items() if w.last_session_error}
        ex = self.executor
        if ex is None:
            return HealthInputs(sessions, processes=False, draining=bool(self._signals), errors=errors)
        alive = {n: sum(1 for c in p.children if c.state.value != "dead") for n, p in ex.pools.items()}
        ready = {n: len(p.active()) for n, p in ex.pools.items()}
        return HealthInputs(
            sessions,
            alive=alive,
            ready=ready,
            failure=None if ex.failure is None else str(ex.failure),
            ticking=ex.ticking(),
            draining=bool(self._signals),
            errors=errors,
        )

    def _health(self) -> tuple[bool, str]:
        return liveness(self.health_inputs())

    def _ready(self) -> tuple[bool, str]:
        return readiness(self.health_inputs())

    # -- signals -----------------------------------------------------------------------
    def _on_stop_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info("%s: draining (grace %.0fs); send it again to stop at once", sig.name, self.config.grace)
            self._stop_worker(fast=False)
        else:
            log.warning("%s again: releasing in-flight tasks and exiting now", sig.name)
            self._stop_worker(fast=True)

    def _on_reload_signal(self) -> None:
        log.info("SIGHUP: reloading")
        self._spawn(self.reload())

    def _on_runtime_failure(self, failure: RuntimeFailure) -> None:
        self.exit_code = EXIT_CHILDREN
        self._stop_worker(fast=True)

    def _stop_worker(self, *, fast: bool) -> None:
        if not self.workers:
            return
        if fast and self.executor is not None:
            self.executor.abort("fast shutdown")
        for worker in self.workers.values():
            worker.stop(immediate=fast)
