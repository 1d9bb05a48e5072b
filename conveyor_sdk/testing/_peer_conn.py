"""Server side of one HTTP/2 connection for :class:`~conveyor_sdk.testing.ScriptedPeer`."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable

import h2.events
import h2.exceptions

from conveyor_sdk._h2kernel.peer import keep_open_after_goaway, peer_connection
from conveyor_sdk._transport.signal import Signal
from conveyor_sdk.testing._peer_session import PeerSession

__all__ = ["PeerConnection", "Signal"]


class PeerConnection:
    """Owns the h2 server state and the socket of one client connection."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        protocol: str,
        on_request: Callable[[PeerSession], None],
    ) -> None:
        self.h2 = peer_connection()
        self._reader = reader
        self._writer = writer
        self.protocol = protocol
        self._on_request = on_request
        self.sessions: dict[int, PeerSession] = {}
        self.signal = Signal()
        self.closed = False
        self._pings: dict[bytes, asyncio.Future[None]] = {}

    async def run(self) -> None:
        """Serve the connection until EOF, an HTTP/2 error, or cancellation."""
        self.h2.initiate_connection()
        try:
            await self.flush()
            while not self.closed:
                data = await self._reader.read(65536)
                if not data:
                    break
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError:
                    await self.flush()
                    break
                for event in events:
                    self._dispatch(event)
                await self.flush()
                self.signal.fire()
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed = True
            self.signal.fire()
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()

    def _dispatch(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            sid = event.stream_id or 0
            headers = {str(k): str(v) for k, v in event.headers or ()}
            session = PeerSession(self, sid, headers, self.protocol)
            self.sessions[sid] = session
            self._on_request(session)
        elif isinstance(event, h2.events.DataReceived):
            found = self.sessions.get(event.stream_id or 0)
            if found is not None:
                found._on_data(event.data or b"", event.flow_controlled_length or 0)
        elif isinstance(event, h2.events.StreamEnded):
            found = self.sessions.get(event.stream_id or 0)
            if found is not None:
                found.client_half_closed = True
        elif isinstance(event, h2.events.StreamReset):
            found = self.sessions.get(event.stream_id or 0)
            if found is not None:
                found.client_reset = int(event.error_code or 0)
        elif isinstance(event, h2.events.PingAckReceived):
            fut = self._pings.pop(event.ping_data or b"", None)
            if fut is not None and not fut.done():
                fut.set_result(None)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True

    async def flush(self) -> None:
        """Write whatever h2 has queued."""
        data = self.h2.data_to_send()
        if data and not self._writer.is_closing():
            self._writer.write(data)
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.drain()

    def ack(self, stream_id: int, size: int) -> None:
        """Give ``size`` received bytes back to the client's windows (written on next flush)."""
        with contextlib.suppress(h2.exceptions.H2Error):
            self.h2.acknowledge_received_data(size, stream_id)
        data = self.h2.data_to_send()
        if data and not self._writer.is_closing():
            self._writer.write(data)

    async def send_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        """Send DATA within flow-control windows, waiting for WINDOW_UPDATEs as needed."""
        view = memoryview(data)
        while view:
            window = min(self.h2.local_flow_control_window(stream_id), self.h2.max_outbound_frame_size)
            if window <= 0:
                if self.closed:
                    raise ConnectionError("connection closed while waiting for flow-control window")
                await self.signal.wait()
                continue
            self.h2.send_data(stream_id, bytes(view[:window]))
            view = view[window:]
            await self.flush()
        if end_stream:
            self.h2.end_stream(stream_id)
            await self.flush()

    async def ping(self, timeout: float) -> None:  # noqa: ASYNC109  # per-call timeouts are the documented test API
        """PING the client and wait for its ACK."""
        payload = os.urandom(8)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pings[payload] = fut
        self.h2.ping(payload)
        await self.flush()
        async with asyncio.timeout(timeout):
            await fut

    def abort(self) -> None:
        """Drop the socket at once (no GOAWAY)."""
        self.closed = True
        self._writer.transport.abort()
        self.signal.fire()

    async def goaway(self, error_code: int, last_stream_id: int | None, data: bytes) -> None:
        """Send GOAWAY. With NO_ERROR the open streams may still be finished by the script."""
        self.h2.close_connection(error_code, data or None, last_stream_id)
        if error_code == 0:
            keep_open_after_goaway(self.h2)  # so scripted streams can finish
            await self.flush()
        else:
            await self.flush()
            self.closed = True
            self._writer.close()
        self.signal.fire()
