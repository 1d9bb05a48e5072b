"""Task calls over a pyqwest transport: HTTP/1.1 (``http2=False``) and a ``transport=`` given to the Client.

Our HTTP/2 transport (:class:`~conveyor_sdk._client.h2transport.H2Transport`) speaks only
HTTP/2; these two cases keep pyqwest for moving bytes and nothing else. The call itself (headers,
framing, deadline, reading the answer, errors) is the same :class:`~conveyor_sdk._client.unary.UnaryStub`
as on the default path: only :meth:`PyqwestExchange.exchange` differs.

A pyqwest transport inflates a gzip answer itself (connectrpc relies on that: it asks for gzip and
leaves inflating to the transport), but may leave its ``content-encoding`` header in place
(``pyqwest.testing.ASGITransport`` does), so the header is dropped here: the body is plain.
A failure below pyqwest (refused connection, reset, TLS) is a retryable
:class:`~conveyor_sdk.errors.Unavailable`, as connectrpc reports it.
"""

from __future__ import annotations

import asyncio
import urllib.parse

import pyqwest

from conveyor_sdk._client.unary import Exchange
from conveyor_sdk.errors import ConveyorError, Unavailable

__all__ = ["PyqwestExchange"]


class PyqwestExchange:
    """``exchange()`` for :class:`~conveyor_sdk._client.unary.UnaryStub` over one pyqwest transport."""

    __slots__ = ("_http", "_prefix", "_transport")

    def __init__(self, transport: pyqwest.Transport, address: str) -> None:
        parts = urllib.parse.urlsplit(address)
        self._prefix = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        self._transport = transport
        # Client.post reads the whole answer on pyqwest's side: one hand-over back to the event
        # loop per call instead of one per body chunk (docs/client.md, "Transport", has the figures).
        self._http = pyqwest.Client(transport)

    def __repr__(self) -> str:
        return f"<PyqwestExchange {self._prefix} {type(self._transport).__name__}>"

    async def exchange(
        self, path: str, fields: tuple[tuple[str, str], ...], body: bytes, seconds: float | None
    ) -> Exchange:
        """POST ``body`` to ``path`` and read the whole answer within ``seconds`` (TimeoutError after)."""
        async with asyncio.timeout(seconds):
            try:
                response = await self._http.post(self._prefix + path, fields, body)
            except (ConveyorError, TimeoutError, asyncio.CancelledError):
                raise
            except Exception as exc:  # pyqwest's and the OS's errors: the isolation point for them
                raise Unavailable(str(exc) or type(exc).__name__) from exc
        headers = [(k, v) for k, v in response.headers.items() if k != "content-encoding"]
        return Exchange(response.status, headers, bytes(response.content), list(response.trailers.items()))
