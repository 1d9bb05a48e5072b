"""The metrics listener: ``GET /metrics`` in Prometheus text format, on a port of its own.

A separate listener (``--metrics-port``), as conveyord has, so a scraper never needs the API's
bearer token and the API is never exposed where the metrics are. It speaks just enough
HTTP/1.1 for Prometheus, curl and KEDA: one request per connection, a bounded request head
read under a timeout, ``404`` for any other path, ``405`` for any other method.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

__all__ = ["CONTENT_TYPE", "MetricsListener"]

log = logging.getLogger("conveyor.server.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_HEAD_LIMIT = 8192
_HEAD_TIMEOUT = 5.0


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class MetricsListener:
    """Serves ``render()`` at ``/metrics`` on ``host:port`` (0 picks a free port)."""

    def __init__(self, render: Callable[[], str], host: str, port: int) -> None:
        self._render = render
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self.url = ""

    def __repr__(self) -> str:
        return f"MetricsListener(url={self.url!r})"

    async def start(self) -> str:
        """Bind and return the metrics URL (``http://host:port/metrics``). Raises OSError."""
        self._server = await asyncio.start_server(self._serve, self._host, self._port, limit=_HEAD_LIMIT)
        host, port = self._server.sockets[0].getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}/metrics"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_HEAD_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            writer.write(self._answer(head))
            await writer.drain()
        except asyncio.LimitOverrunError:
            writer.write(_response("431 Request Header Fields Too Large", b"request head too large\n"))
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass  # a client that sends no complete head, or goes away, gets nothing
        finally:
            writer.close()

    def _answer(self, head: bytes) -> bytes:
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3:
            return _response("400 Bad Request", b"bad request line\n")
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if target != b"/metrics":
            return _response("404 Not Found", b"only /metrics is served here\n")
        if method not in (b"GET", b"HEAD"):
            return _response("405 Method Not Allowed", b"use GET\n")
        body = self._render().encode("utf-8")
        answer = _response("200 OK", body, CONTENT_TYPE)
        return answer[: len(answer) - len(body)] if method == b"HEAD" else answer
