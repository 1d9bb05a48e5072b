"""The reference server as an embeddable object, plus the process entry point.

Embedding::

    server = Server(ServerConfig(port=0, dev=True))
    url = await server.start()       # "http://127.0.0.1:54321"
    ...
    await server.stop()              # GOAWAY, end sessions (leases released), close

``Server(config, web=factory)`` also serves an ASGI application (the CLI passes the web
dashboard) on the same port for every request that is not an RPC or a health check:
``factory(url)`` is called once the port is bound, the application's lifespan starts before
``start`` returns and ends first thing in ``stop`` (see ``_http/asgi.py``).

:func:`run` is what the command line calls: it prints exactly one
``listening on <url>`` line on stdout when ready, handles SIGTERM/SIGINT and
returns the process exit code.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any

from conveyor_sdk._transport import eventloop
from conveyor_server_min.config import ServerConfig
from conveyor_server_min.service_api import EngineConfig, ServiceSet

from ._http.asgi import AsgiApp, AsgiBridge, WebAppError
from ._http.auth import Authenticator
from ._http.listener import HttpProtocol, Hub, make_ssl_context
from ._http.metrics import MetricsListener
from ._http.rpc import Router

__all__ = ["MEMORY_HOST", "Server", "WebAppError", "WebFactory", "run", "start_or_report"]

log = logging.getLogger("conveyor.server")

MEMORY_HOST = "in-memory.invalid"  # the URL host of a server started with ``listen=False``
WebFactory = Callable[[str], AsgiApp]  # the server's URL -> the ASGI app to serve beside the RPCs


def load_services(engine: EngineConfig, db: str | None = None) -> ServiceSet:
    """The real services (``conveyor_server_min._services.build_services``); ``db`` = durable store.

    Raises :class:`~conveyor_server_min._engine.store.StoreError` when the database cannot be used.
    """
    from conveyor_server_min._services import build_services

    return build_services(engine, db=db)


def store_description(config: ServerConfig) -> str:
    """The one start-up line naming the store."""
    if config.db:
        return f"store: sqlite {config.db} (durable: acknowledged work survives a restart)"
    return "store: memory (NOT durable: a restart loses every task; use --db PATH to keep them)"


class Server:
    """One listener serving gRPC, gRPC-Web and Connect over h2c, HTTP/1.1 and TLS."""

    def __init__(
        self, config: ServerConfig, *, services: ServiceSet | None = None, web: WebFactory | None = None
    ) -> None:
        self.config = config
        self._services = services
        self._web_factory = web
        self._web: AsgiBridge | None = None
        self._server: asyncio.Server | None = None
        self._hub: Hub | None = None
        self._stopped = asyncio.Event()
        self._stopping = False
        self._started = False
        self._metrics: MetricsListener | None = None
        self.url = ""
        self.metrics_url = ""  # http://HOST:PORT/metrics once started with ``config.metrics_port``

    @property
    def services(self) -> ServiceSet:
        """The service set (built on ``start`` when not given)."""
        if self._services is None:
            raise RuntimeError("server not started")
        return self._services

    def __repr__(self) -> str:
        state = "stopping" if self._stopping else "serving" if self._started else "new"
        return f"Server(url={self.url!r}, state={state})"

    def statistics(self) -> dict[str, int | str]:
        """A snapshot: URL, open connections and open HTTP/2 streams."""
        conns = list(self._hub.connections) if self._hub is not None else []
        streams = sum(conn.open_streams() for conn in conns)
        return {"url": self.url, "connections": len(conns), "streams": streams}

    def _ready(self) -> bool:
        return self._started and not self._stopping

    async def start(self, *, listen: bool = True) -> str:
        """Start services and bind; returns the URL clients should use.

        ``listen=False`` binds nothing (no listener, no web application, no metrics port):
        connections come only through :meth:`accept` (an in-memory pair in tests), and the URL
        names no real host."""
        config = self.config
        if self._services is None:
            self._services = load_services(config.engine, config.db)
        await self._services.start()
        router = Router(
            self._services,
            Authenticator(config.tokens),
            max_message=config.max_message_bytes,
            ready=self._ready,
            body_timeout=config.http.body_timeout,
        )
        self._hub = Hub(router, max_message=config.max_message_bytes, limits=config.http)
        ssl_ctx = (
            make_ssl_context(config.tls_cert, config.tls_key) if config.tls_cert and config.tls_key else None
        )
        if not listen:
            self.url = f"{config.scheme}://{MEMORY_HOST}"
            self._started = True
            return self.url
        hub = self._hub
        try:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: HttpProtocol(hub), config.host, config.port, ssl=ssl_ctx, backlog=1024
            )
        except BaseException:
            await self._services.stop()
            raise
        self._started = True
        sockname = self._server.sockets[0].getsockname()
        host = sockname[0]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{config.scheme}://{shown}:{sockname[1]}"
        try:
            if self._web_factory is not None:
                await self._start_web(router, (host, sockname[1]))
            await self._start_metrics()
        except BaseException:
            await self.stop()
            raise
        log.info(
            "serving on %s (auth %s, event loop %s)",
            self.url,
            "on" if config.tokens else "off",
            eventloop.loop_kind(asyncio.get_running_loop()),
        )
        return self.url

    def accept(self) -> asyncio.Protocol:
        """The protocol of one new connection, as the listener makes for each accepted socket; the
        caller joins it to a transport (``conveyor_sdk.testing.memory`` joins an in-memory pair)."""
        if self._hub is None or self._stopping:
            raise RuntimeError("server not started, or stopping")
        return HttpProtocol(self._hub)

    async def _start_web(self, router: Router, address: tuple[str, int]) -> None:
        assert self._web_factory is not None
        app = self._web_factory(self.url)
        bridge = AsgiBridge(
            app, scheme=self.config.scheme, server=address, body_timeout=self.config.http.body_timeout
        )
        await bridge.startup()
        self._web = router.web = bridge

    async def _start_metrics(self) -> None:
        config = self.config
        render = getattr(self._services, "metrics_text", None)
        if config.metrics_port is None or render is None:
            return
        self._metrics = MetricsListener(render, config.metrics_host or config.host, config.metrics_port)
        self.metrics_url = await self._metrics.start()
        log.debug("metrics on %s", self.metrics_url)

    async def serve_forever(self) -> None:
        """Wait until :meth:`stop` has finished."""
        await self._stopped.wait()

    async def stop(self) -> None:
        """Stop accepting, GOAWAY, end sessions via ``services.stop()``, close connections. Idempotent."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.shutdown_grace  # one budget for the whole shutdown
        try:
            if self._web is not None:  # first: its clients (e.g. a WatchEvents stream) end cleanly
                await self._web.shutdown(min(2.0, self.config.shutdown_grace * 0.3))
            if self._server is not None:
                self._server.close()
            if self._metrics is not None:
                await self._metrics.stop()
            if self._hub is not None:
                self._hub.shutdown()
            if self._services is not None:
                budget = self.config.shutdown_grace * 0.7
                await _bounded(self._services.stop(), budget, "services.stop()")
            if self._hub is not None:
                remaining = max(0.2, deadline - loop.time())
                if not await self._hub.wait_idle(remaining):
                    log.warning("streams still open at the shutdown deadline; closing them")
                self._hub.close_all()
                await self._hub.wait_closed(1.0)
            if self._server is not None:
                await _bounded(self._server.wait_closed(), 1.0, "listener close")
        finally:
            self._stopped.set()


async def _bounded(awaitable: Any, seconds: float, what: str) -> None:
    try:
        async with asyncio.timeout(seconds):
            await awaitable
    except TimeoutError:
        log.warning("%s did not finish within %.1fs", what, seconds)


async def start_or_report(server: Server) -> str | None:
    """Start ``server`` and return its URL, or print one ``error:`` line and return None
    (port taken, unusable database, web app that failed to start)."""
    from conveyor_server_min._engine.store import StoreError

    config = server.config
    try:
        return await server.start()
    except OSError as exc:
        print(f"error: cannot listen on {config.host}:{config.port}: {exc.strerror or exc}", file=sys.stderr)
    except (StoreError, WebAppError) as exc:
        print(f"error: {exc}", file=sys.stderr)
    return None


async def _serve(config: ServerConfig, web: WebFactory | None = None) -> int:
    server = Server(config, web=web)
    url = await start_or_report(server)
    if url is None:
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(store_description(config), file=sys.stderr, flush=True)
    if server.metrics_url:
        print(f"metrics on {server.metrics_url}", file=sys.stderr, flush=True)
    print(f"listening on {url}", flush=True)
    failed = getattr(server.services, "failed", None)
    waits = [asyncio.ensure_future(stop.wait())]
    if isinstance(failed, asyncio.Event):
        waits.append(asyncio.ensure_future(failed.wait()))
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waits:
        waiter.cancel()
    log.info("shutting down")
    await server.stop()
    return 1 if isinstance(failed, asyncio.Event) and failed.is_set() else 0


def run(config: ServerConfig, web: WebFactory | None = None) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code (0 after a clean shutdown).

    ``web``: an ASGI application factory served on the same port (see :class:`Server`).
    """
    return eventloop.run(_serve(config, web), config.loop)
