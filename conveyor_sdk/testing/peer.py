"""ScriptedPeer: a tiny HTTP/2 server that plays the Conveyor server, badly on demand.

It speaks just enough gRPC or Connect streaming to host a ``WorkerService/Session``
stream and hands each opened stream to the test script, which decides what to
send and how to end it. By default (``protocol="auto"``) every stream is answered
in the client's own protocol and codec, read from its request ``content-type``:
gRPC, or Connect streaming with binary proto or JSON; errors end the stream the
same way (gRPC trailers, or a Connect end-of-stream message carrying the error)::

    async with ScriptedPeer() as peer:
        stream = await open_session(peer.url, TransportOptions())
        sess = await peer.accept()
        hello = await sess.recv()
        await sess.send(pb.ServerMessage(welcome=pb.Welcome(session_id="s1")))
        await sess.end(Code.UNAVAILABLE, "going away")

It binds 127.0.0.1 on port 0 (``peer.url`` tells the address) and never
validates frames: the script does. A client's half-close never ends a stream by
itself: the peer's send side stays open until the script calls ``end`` (or
``reset``), as §5.10 lets a server keep dispatching until it answers the close.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as _ssl
from collections import deque
from dataclasses import dataclass
from types import TracebackType

from h2.errors import ErrorCodes

from conveyor_sdk.errors import Code
from conveyor_sdk.testing._peer_conn import PeerConnection, Signal
from conveyor_sdk.testing._peer_session import PeerSession

__all__ = ["PeerSession", "ScriptedPeer"]

# Loop turns from a socket accept to its connection callback: the accept task attaches the
# transport (1), connection_made runs (2), the callback task takes its first step (3). One spare.
_ACCEPT_TURNS = 4


@dataclass(frozen=True, slots=True)
class _Rejection:
    code: Code | None = None
    message: str = ""
    http_status: int = 0
    body: bytes = b""
    content_type: str = "application/json"


class ScriptedPeer:
    """An asyncio HTTP/2 server on 127.0.0.1:0 whose sessions a test drives by hand.

    Args:
        protocol: ``"auto"`` (default: answer each stream in the client's own protocol and
            codec), or ``"grpc"`` / ``"connect"`` to force one (binary proto), e.g. to test
            how a client copes with a server answering in the wrong protocol.
        require_token: when set, streams without ``authorization: Bearer <token>`` are
            rejected with ``unauthenticated`` (they still count in ``sessions_opened``).
        ssl: a server-side TLS context; the URL becomes ``https://``. Offer ALPN ``h2`` on it
            (``ctx.set_alpn_protocols(["h2"])``) unless the test wants ALPN to fail.
    """

    def __init__(
        self, protocol: str = "auto", *, require_token: str | None = None, ssl: _ssl.SSLContext | None = None
    ) -> None:
        if protocol not in ("auto", "grpc", "connect"):
            raise ValueError(f"protocol must be 'auto', 'grpc' or 'connect', not {protocol!r}")
        self.protocol = protocol
        self.require_token = require_token
        self._ssl = ssl
        self.url = ""
        self.sessions_opened = 0
        self.streams: list[PeerSession] = []  # every stream opened, accepted or rejected, in order
        self.connections: list[PeerConnection] = []
        self._server: asyncio.Server | None = None
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._accepted: deque[PeerSession] = deque()
        self._rejections: deque[_Rejection] = deque()
        self._signal = Signal()

    def __repr__(self) -> str:
        return f"<ScriptedPeer {self.protocol} {self.url} opened={self.sessions_opened}>"

    async def __aenter__(self) -> ScriptedPeer:
        self._server = await asyncio.start_server(self._on_client, "127.0.0.1", 0, ssl=self._ssl)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.url = f"{'https' if self._ssl else 'http'}://{host}:{port}"
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop listening, drop every connection and wait for their tasks.

        Accepting stops first and the server object closes a few loop turns later: asyncio
        (3.11) cannot attach a connection it already accepted to a closed server and would drop
        its socket unclosed (a ResourceWarning at the next garbage collection). Connections that
        arrive in those turns are aborted as soon as they reach this peer.
        """
        self._closing = True
        if self._server is not None:
            loop = asyncio.get_running_loop()
            for sock in self._server.sockets:
                loop.remove_reader(sock.fileno())
            for _ in range(_ACCEPT_TURNS):
                await asyncio.sleep(0)  # turns, not time: see _ACCEPT_TURNS
            self._server.close()
        for conn in self.connections:
            conn.abort()
        # Connection tasks end on their own once their socket is aborted; cancelling the
        # asyncio.start_server callback task instead would log a spurious error on 3.11.
        pending = [task for task in self._tasks if not task.done()]
        if pending:
            _, late = await asyncio.wait(pending, timeout=5.0)
            for task in late:
                task.cancel()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    # ---- scripting -------------------------------------------------------------------------------

    async def accept(self, timeout: float = 10.0) -> PeerSession:  # noqa: ASYNC109  # per-call timeouts are the documented test API
        """The next session stream the client opened (raises TimeoutError)."""
        async with asyncio.timeout(timeout):
            while not self._accepted:
                await self._signal.wait()
        return self._accepted.popleft()

    def reject_next(self, code: Code, message: str = "") -> None:
        """Answer the next stream with an error at once (gRPC Trailers-Only / Connect end-of-stream)."""
        self._rejections.append(_Rejection(code=code, message=message))

    def reject_next_http(
        self, status: int, body: bytes = b"", content_type: str = "application/json"
    ) -> None:
        """Answer the next stream with a plain HTTP ``status`` response carrying ``body``."""
        self._rejections.append(_Rejection(http_status=status, body=body, content_type=content_type))

    async def goaway(
        self, error_code: int = ErrorCodes.NO_ERROR, *, last_stream_id: int | None = None, data: bytes = b""
    ) -> None:
        """Send GOAWAY on every connection. NO_ERROR lets scripted streams still finish."""
        for conn in list(self.connections):
            if not conn.closed:
                await conn.goaway(error_code, last_stream_id, data)

    async def ping(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109  # per-call timeouts are the documented test API
        """PING every open connection and wait for each ACK."""
        for conn in list(self.connections):
            if not conn.closed:
                await conn.ping(timeout)

    # ---- internals -------------------------------------------------------------------------------

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closing:  # accepted while closing (see aclose): drop it, closed
            writer.transport.abort()
            return
        conn = PeerConnection(reader, writer, self.protocol, self._on_request)
        self.connections.append(conn)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await conn.run()
        finally:
            self._tasks.discard(task)

    def _on_request(self, session: PeerSession) -> None:
        self.sessions_opened += 1
        self.streams.append(session)
        rejection = self._rejections.popleft() if self._rejections else None
        token = self.require_token
        if (
            rejection is None
            and token is not None
            and session.headers.get("authorization") != f"Bearer {token}"
        ):
            rejection = _Rejection(code=Code.UNAUTHENTICATED, message="missing or invalid bearer token")
        if rejection is None:
            self._accepted.append(session)
            self._signal.fire()
            return
        task = asyncio.get_running_loop().create_task(self._reject(session, rejection))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reject(self, session: PeerSession, rejection: _Rejection) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            if rejection.http_status:
                await session.send_headers((("content-type", rejection.content_type),), rejection.http_status)
                await session._conn.send_data(session.stream_id, rejection.body, True)
            else:
                await session.end(rejection.code, rejection.message)
