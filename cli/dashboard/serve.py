"""Run the dashboard app under uvicorn on a socket we bind ourselves (so port 0 works and the
real address is known before the first request)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette

from conveyor_cli.dashboard.app import create_app
from conveyor_cli.dashboard.config import DashboardConfig

__all__ = ["bind", "for_server", "serve_alone", "serve_beside", "url_of"]


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (IPv6 when ``host`` contains ':'); OSError when taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://host:port/`` of a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def _uvicorn_config(app: Any, *, lifespan: str = "on") -> uvicorn.Config:
    return uvicorn.Config(
        app, log_level=logging.WARNING, access_log=False, lifespan=lifespan, server_header=False
    )


def for_server(server_config: Any, auth_token: str | None) -> Callable[[str], Starlette]:
    """The dashboard factory ``conveyor server`` gives its server (``Server(web=...)``).

    Called with the server's own URL once it is bound: the dashboard talks to that URL like any
    client, with the server's first ``--token``. Its login secret is ``auth_token`` or, without
    one, that same first server token (a server that requires tokens for RPCs also protects its
    pages; the token itself never reaches the browser, only an HMAC cookie). The WatchEvents feed
    starts with the first page view.
    """
    token = server_config.tokens[0] if server_config.tokens else None

    def make(url: str) -> Starlette:
        cfg = DashboardConfig(server=url, token=token, auth_token=auth_token or token, feed_on_demand=True)
        return create_app(cfg)

    return make


async def serve_alone(config: DashboardConfig, sock: socket.socket) -> int:
    """``conveyor dashboard``: serve until SIGINT/SIGTERM, then shut down cleanly; returns 0."""
    uv = _SharedLoopServer(_uvicorn_config(create_app(config)))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: setattr(uv, "should_exit", True))
    await uv.serve(sockets=[sock])
    return 0


class _SharedLoopServer(uvicorn.Server):
    """uvicorn without its own signal handling (which re-raises the signal after shutdown, so the
    process would die of SIGTERM): our loop's handlers set ``should_exit`` and the exit code is 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_beside(
    server_config: Any, host: str, port: int, auth_token: str | None, *, at_root: bool = True
) -> int:
    """``conveyor server --dashboard-port``: the reference server and the dashboard in one event loop.

    The dashboard is served on an extra port by uvicorn (the same ASGI app as ``conveyor
    dashboard``) and, with ``at_root``, also at ``/`` of the server's own port: then both serve one
    app instance (one client, one event feed) whose lifespan the server runs. Returns the exit code.
    """
    from conveyor_server_min.server import Server, start_or_report

    factory = for_server(server_config, auth_token)
    made: list[Starlette] = []

    def make(url: str) -> Starlette:
        made.append(factory(url))
        return made[0]

    server = Server(server_config, web=make if at_root else None)
    url = await start_or_report(server)
    if url is None:
        return 1
    try:
        sock = bind(host, port)
    except OSError as exc:
        await server.stop()
        print(f"error: cannot listen on {host}:{port} (dashboard): {exc.strerror or exc}", file=sys.stderr)
        return 1
    app = made[0] if made else factory(url)
    uv = _SharedLoopServer(_uvicorn_config(app, lifespan="off" if at_root else "on"))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"listening on {url}", flush=True)
    print(f"dashboard on {url_of(sock)} for {url}", flush=True)
    dash = asyncio.create_task(uv.serve(sockets=[sock]))
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({dash, stopper}, return_when=asyncio.FIRST_COMPLETED)
    uv.should_exit = True
    stopper.cancel()
    await dash
    sock.close()
    await server.stop()
    return 0
