"""The public asyncio :class:`Worker`: configuration, run/run_sync/stop, signals, statistics.

The event loop that carries out the session machine's actions lives in
:mod:`conveyor_sdk._worker.driver`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import signal as _signal
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from conveyor_sdk._encryption.hooks import Encryptor, check_encryptor
from conveyor_sdk._protocol.backoff import Backoff, parse_addresses
from conveyor_sdk._protocol.hello import SessionConfig
from conveyor_sdk._protocol.session import WorkerSession
from conveyor_sdk._transport import SessionStream, TLSOptions, TransportOptions, eventloop, open_session
from conveyor_sdk._transport._connect import Dialer, dial_tcp
from conveyor_sdk._transport.clock import Clock, SystemClock
from conveyor_sdk._transport.keepalive import DEFAULT_INTERVAL, DEFAULT_TIMEOUT, KeepaliveOptions
from conveyor_sdk._version import __version__
from conveyor_sdk._worker.defaults import IN_PROCESS_ASYNC_SLOTS, default_concurrency
from conveyor_sdk._worker.driver import Driver
from conveyor_sdk._worker.events import StopRequested
from conveyor_sdk._worker.executor import Executor
from conveyor_sdk._worker.local import LocalExecutor
from conveyor_sdk._worker.registry import Registry

__all__ = ["SDK_VERSION", "Worker"]

SDK_VERSION = f"conveyor-py/{__version__}"  # non-semver on purpose: always admitted upstream
log = logging.getLogger("conveyor.worker")


class Worker:
    """A Conveyor worker: one session stream, local concurrency gate, drain on stop.

    Args:
        server: ``http://host:port`` (h2c) or ``https://...`` (TLS); several addresses (a
            cluster's nodes) as a list or a comma-separated string. A session that ends, or
            a connect that fails, moves on to the next address at once; the reconnect
            backoff is drawn only after a whole round of addresses failed.
        queues: queue -> weight (or an iterable of names, weight 1).
        concurrency: most jobs executing at once (a batch counts once). None (the default):
            chosen by :meth:`run` from the registry, 64 when every handler is async, else 8
            (sync handlers each hold one thread); see ``conveyor_sdk._worker.defaults``.
        token: bearer token. protocol: ``"grpc"`` or ``"connect"``. tls: TLS options.
        grace: seconds a drain lets in-flight work finish before releasing it.
        executor: where handler code runs (default: async in-loop, sync in a thread pool).
        labels / min_server_version: sent in Hello.
        logger: replaces ``logging.getLogger("conveyor.worker")``.
        progress_interval: at most one Progress frame per task per this many seconds.
        rng: random source in [0, 1) for reconnect jitter (tests).
        transport_options: a ``TransportOptions`` overriding token/protocol/tls.
        close_timeout: how long to wait for the server to end the stream after our half-close.
        encryption: opens sealed payloads (``conveyor.encryption`` marker) before they are
            decoded; defaults to the registry's own ``encryption`` (``App(encryption=...)``).
            See :mod:`conveyor_sdk.encryption` for the failures and which are retried.
        task_log: one INFO line per finished task (id, type, duration, retried n/max); turn
            it off for very high task rates. Failed attempts are logged either way.
        reconnect_base / reconnect_max: §5.9 backoff base and cap in seconds (0.5 and 30).
        setup_timeout: seconds a new session waits for the server's Welcome before the attempt
            counts as failed and the next address is tried; default 30 with one address,
            ``SEVERAL_SETUP_TIMEOUT`` (2) with several: a healthy node welcomes in
            milliseconds, while a conveyord node whose cluster has not yet noticed a dead
            peer can take seconds to fail the set-up (docs/interop.md).
        keepalive_interval / keepalive_timeout: an HTTP/2 PING goes to the server every
            ``keepalive_interval`` seconds (5); one unanswered for ``keepalive_timeout`` (10),
            or a write that makes no progress that long, ends the session as transient, and
            the worker reconnects (to the next address, if it has several). A dead link is
            so noticed 10-15 s after its last answer, well before a lease lapses. Ignored
            when ``transport_options`` is given (its ``keepalive`` counts).
        clock: for tests: the wall clock and timers the session's leases, heartbeats,
            deadlines and reconnect waits follow (``conveyor_sdk._transport.clock.ManualClock``
            runs them in virtual time), and also the session keepalive's PINGs and the heal
            probe's waits. Not a stable API; the default is the system clock (the keepalive
            keeps its monotonic time, safe from wall-clock steps).
        dialer: for tests and in-process use: how the session and the heal probe connect
            (``conveyor_sdk._transport._connect.Dialer``); ``MemoryServer.worker()`` passes its
            in-memory one (``conveyor_sdk.testing.memory``). Default: TCP (and TLS).
    """

    def __init__(
        self,
        server: str | Sequence[str],
        *,
        queues: Mapping[str, int] | list[str] | tuple[str, ...] = ("default",),
        concurrency: int | None = None,
        token: str | None = None,
        protocol: Literal["grpc", "connect"] = "grpc",
        tls: TLSOptions | None = None,
        grace: float = 30.0,
        executor: Executor | None = None,
        labels: Mapping[str, str] | None = None,
        min_server_version: str = "",
        logger: logging.Logger | None = None,
        progress_interval: float = 1.0,
        rng: Callable[[], float] | None = None,
        transport_options: TransportOptions | None = None,
        close_timeout: float = 10.0,
        encryption: Encryptor | None = None,
        task_log: bool = True,
        reconnect_base: float = 0.5,
        reconnect_max: float = 30.0,
        keepalive_interval: float = DEFAULT_INTERVAL,
        keepalive_timeout: float = DEFAULT_TIMEOUT,
        setup_timeout: float | None = None,
        clock: Clock | None = None,
        dialer: Dialer | None = None,
    ) -> None:
        # Validate now: a bad queue/weight/concurrency never reaches the network.
        self._config = SessionConfig.build(
            queues=queues,
            concurrency=IN_PROCESS_ASYNC_SLOTS if concurrency is None else concurrency,
            sdk_version=SDK_VERSION,
            labels=labels,
            min_server_version=min_server_version,
        )
        if protocol not in ("grpc", "connect"):
            raise ValueError(f"protocol must be 'grpc' or 'connect', not {protocol!r}")
        self.servers = parse_addresses(server)
        self._backoff_args = (reconnect_base, reconnect_max)
        self.setup_timeout = _setup_timeout(setup_timeout, len(self.servers))
        Backoff(base=reconnect_base, cap=reconnect_max)  # validates both now, not at run()
        self.keepalive = KeepaliveOptions(keepalive_interval, keepalive_timeout)  # ValueError if bad
        self._concurrency_given = concurrency
        self.concurrency = self._config.concurrency  # the registry's default replaces it in run()
        self.grace = grace
        self.token = token
        self.protocol: Literal["grpc", "connect"] = protocol
        self.tls = tls
        self.progress_interval = progress_interval
        self.close_timeout = close_timeout
        self.task_log = task_log
        self._executor_arg = executor
        self.encryption = check_encryptor(encryption)
        self._transport_options = transport_options
        self._log = logger or log
        self._rng = rng or random.Random().random
        self._clock: Clock = clock or SystemClock()
        if dialer is not None and not callable(dialer):
            raise TypeError(f"dialer must be an async callable (a Dialer), not {type(dialer).__name__}")
        self._dialer: Dialer = dialer or dial_tcp
        self._loop: asyncio.AbstractEventLoop | None = None
        self._machine: WorkerSession | None = None
        self._driver: Driver | None = None
        self._pending_stops = 0
        self._last_counters: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def server(self) -> str:
        """The address the session is on (or connects to next)."""
        machine = self._machine
        return machine.backoff.address if machine is not None else self.servers[0]

    @property
    def logger(self) -> logging.Logger:
        return self._log

    @property
    def rng(self) -> Callable[[], float]:
        """The random source in [0, 1) of reconnect jitter (and of the heal probe)."""
        return self._rng

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def dialer(self) -> Dialer:
        """How sessions and heal probes connect (TCP unless a test gave another)."""
        return self._dialer

    @property
    def transport_options(self) -> TransportOptions:
        """What sessions are opened with: ``transport_options`` if given, else built from the
        token, protocol, tls and keepalive arguments."""
        return self._transport_options or TransportOptions(
            token=self.token,
            protocol=self.protocol,
            tls=self.tls,
            keepalive=self.keepalive,
        )

    def open_session(self) -> Awaitable[SessionStream]:
        """Connect to :attr:`server` and open the session stream (the driver calls this)."""
        return open_session(self.server, self.transport_options, dialer=self._dialer, clock=self._clock)

    @property
    def reconnect_base(self) -> float:
        return self._backoff_args[0]

    @property
    def reconnect_max(self) -> float:
        return self._backoff_args[1]

    @property
    def last_session_error(self) -> str | None:
        """Why the last session ended or could not open (None once a session is established)."""
        driver = self._driver
        return driver.last_error if driver is not None else None

    @property
    def queues(self) -> Mapping[str, int]:
        return self._config.queues

    def __repr__(self) -> str:
        state = repr(self._machine) if self._machine is not None else "not running"
        return f"<Worker {self.server} queues={dict(self.queues)} concurrency={self.concurrency} {state}>"

    def encryption_for(self, registry: Registry) -> Encryptor | None:
        """The encryptor that opens sealed payloads: ours, else the registry's (an App's)."""
        if self.encryption is not None:
            return self.encryption
        found = getattr(registry, "encryption", None)
        return found if isinstance(found, Encryptor) else None

    @property
    def phase(self) -> str:
        """Session phase: ``idle``, ``awaiting-welcome``, ``open`` (established), ``closing``, ``stopped``."""
        machine = self._machine
        return machine.phase.value if machine is not None else "idle"

    def in_flight_by_queue(self) -> dict[str, tuple[int, int]]:
        """Queue -> (running, parked) tasks of the live stream (parked: heartbeated, not started)."""
        machine = self._machine
        return machine.in_flight_by_queue() if machine is not None else {}

    def statistics(self) -> dict[str, Any]:
        """Snapshot: session machine counters plus worker-level counters."""
        machine, driver = self._machine, self._driver
        stats: dict[str, Any] = {
            "server": self.server,
            "servers": list(self.servers),
            "active": self._driver is not None,
        }
        if machine is not None:
            stats.update(dataclasses.asdict(machine.statistics()))
        stats.update(driver.counters if driver is not None else self._last_counters)
        return stats

    # -- control ------------------------------------------------------------------------------
    def stop(self, *, immediate: bool = False) -> None:
        """Start a drain (``grace``); a second call, or ``immediate=True``, releases at once.

        Safe from any thread and from signal handlers; a no-op when not running.
        """
        with self._lock:
            loop, driver = self._loop, self._driver
            if loop is None or driver is None:
                self._pending_stops += 1
                return
        if not loop.is_closed():
            loop.call_soon_threadsafe(driver.post, StopRequested(0.0 if immediate else None))

    async def run(self, registry: Registry) -> None:
        """Serve until stopped (returns) or a fatal error (raises the ConveyorError)."""
        if self._driver is not None:
            raise RuntimeError("this Worker is already running")
        if self._concurrency_given is None:
            self.concurrency = default_concurrency(registry, 0)
        config = SessionConfig.build(
            queues=self._config.queues,
            concurrency=self.concurrency,
            sdk_version=self._config.sdk_version,
            labels=self._config.labels,
            min_server_version=self._config.min_server_version,
            batch_types=registry.batch_types,
        )
        machine = WorkerSession(
            config,
            backoff=Backoff(
                base=self.reconnect_base, cap=self.reconnect_max, rng=self._rng, addresses=self.servers
            ),
            progress_interval=self.progress_interval,
            welcome_timeout=self.setup_timeout,
            close_timeout=self.close_timeout,
        )
        executor = self._executor_arg or LocalExecutor(registry, threads=self.concurrency)
        driver = Driver(self, machine, executor, registry)
        with self._lock:
            self._loop, self._machine, self._driver = asyncio.get_running_loop(), machine, driver
            pending, self._pending_stops = self._pending_stops, 0
        for i in range(pending):
            driver.post(StopRequested(0.0 if i else None))
        try:
            await driver.run()
        finally:
            with self._lock:
                self._loop = self._driver = None
                self._last_counters = dict(driver.counters)

    def run_sync(self, registry: Registry, *, loop: str = "auto") -> None:
        """Blocking run. SIGTERM/SIGINT: first = drain, second = release at once.

        ``loop``: ``auto`` (uvloop when it is installed, else asyncio), ``asyncio`` or ``uvloop``;
        an unknown name, or ``uvloop`` where it is missing, raises InvalidArgument.
        """
        eventloop.run(self._run_with_signals(registry), loop)

    async def _run_with_signals(self, registry: Registry) -> None:
        loop = asyncio.get_running_loop()
        installed = []
        if threading.current_thread() is threading.main_thread():
            for sig in (_signal.SIGTERM, _signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
        try:
            await self.run(registry)
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: int) -> None:
        driver = self._driver
        draining = driver is not None and driver.machine.draining
        self._log.info(
            "received %s: %s", _signal.Signals(sig).name, "releasing at once" if draining else "draining"
        )
        self.stop(immediate=draining)


SEVERAL_SETUP_TIMEOUT = 2.0  # Welcome wait per attempt when there is another address to try


def _setup_timeout(value: float | None, addresses: int) -> float:
    if value is None:
        return 30.0 if addresses == 1 else SEVERAL_SETUP_TIMEOUT
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise ValueError(f"setup_timeout must be a positive number of seconds, got {value!r}")
    return float(value)
