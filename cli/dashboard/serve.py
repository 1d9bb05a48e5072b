"""Run the dashboard app under uvicorn on a socket we bind ourselves (so port 0 works and the
real address is known before the first request)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

import uvicorn

from conveyor_cli.dashboard.app import create_app
from conveyor_cli.dashboard.config import DashboardConfig

__all__ = ["bind", "serve_alone", "serve_beside", "url_of"]


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


def _uvicorn_config(config: DashboardConfig) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(config), log_level=logging.WARNING, access_log=False, lifespan="on", server_header=False
    )


async def serve_alone(config: DashboardConfig, sock: socket.socket) -> int:
    """``conveyor dashboard``: serve until SIGINT/SIGTERM, then shut down cleanly; returns 0."""
    uv = _SharedLoopServer(_uvicorn_config(config))
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


async def serve_beside(server_config: Any, host: str, port: int, auth_token: str | None) -> int:
    """``conveyor server --dashboard-port``: the reference server and the dashboard in one event loop.

    The server keeps its own (hand-rolled HTTP/2) listener; the dashboard is the same ASGI app as
    ``conveyor dashboard`` under uvicorn on a second port, talking to the server over the network
    like any client (with the server's first ``--token``). Returns the exit code.
    """
    from conveyor_server_min.server import Server

    server = Server(server_config)
    try:
        url = await server.start()
    except OSError as exc:
        print(f"error: cannot listen on {server_config.host}:{server_config.port}: {exc}", file=sys.stderr)
        return 1
    try:
        sock = bind(host, port)
    except OSError as exc:
        await server.stop()
        print(f"error: cannot listen on {host}:{port} (dashboard): {exc.strerror or exc}", file=sys.stderr)
        return 1
    token = server_config.tokens[0] if server_config.tokens else None
    dash_cfg = DashboardConfig(server=url, token=token, auth_token=auth_token)
    uv = _SharedLoopServer(_uvicorn_config(dash_cfg))
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
