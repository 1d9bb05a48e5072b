"""Run the dashboard app under uvicorn on a socket we bind ourselves (so port 0 works and the
real address is known before the first request)."""

from __future__ import annotations

import logging
import socket

import uvicorn

from conveyor_cli.dashboard.app import create_app
from conveyor_cli.dashboard.config import DashboardConfig

__all__ = ["bind", "dashboard_server", "url_of"]


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


def dashboard_server(config: DashboardConfig) -> uvicorn.Server:
    """A uvicorn server for the app; run it with ``await server.serve(sockets=[sock])``."""
    level = logging.WARNING
    cfg = uvicorn.Config(
        create_app(config), log_level=level, access_log=False, lifespan="on", server_header=False
    )
    return uvicorn.Server(cfg)
