"""A small raw HTTP/2 client for transport tests: streams, frames, resets, flow control on demand."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._transport._connect import parse_target
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_server_min._http.wire import MessageDecoder, encode_message


@dataclass
class StreamState:
    """Everything received on one stream."""

    headers: dict[str, str] = field(default_factory=dict)
    trailers: dict[str, str] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)
    ended: bool = False
    reset_code: int | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    decoder: MessageDecoder = field(default_factory=lambda: MessageDecoder(64 << 20))
    messages: list[tuple[int, bytes]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.ended or self.reset_code is not None


class H2Client:
    """Raw HTTP/2 over asyncio streams. ``auto_ack=False`` never returns flow-control credit."""

    def __init__(self, *, auto_ack: bool = True, window: int | None = None) -> None:
        self.auto_ack = auto_ack
        self.window = window
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.streams: dict[int, StreamState] = {}
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.closed = asyncio.Event()
        self.window_changed = asyncio.Event()
        self.remote_settings = asyncio.Event()
        self.ping_acks = 0
        self.ping_acked = asyncio.Event()
        self._reader_task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def connect(self, host: str, port: int, *, tls: ssl.SSLContext | None = None) -> H2Client:
        reader, writer = await asyncio.open_connection(host, port, ssl=tls)
        return await self._start(reader, writer)

    async def connect_memory(self, server: MemoryServer) -> H2Client:
        """Connect to an in-process server through an in-memory connection (no socket)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await server.dial(
            lambda: protocol, parse_target(server.url), tls=None, server_hostname=None
        )
        return await self._start(reader, asyncio.StreamWriter(transport, protocol, reader, loop))

    async def _start(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> H2Client:
        self._writer = writer
        if self.window is not None:
            self.conn.local_settings = h2.settings.Settings(
                client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self.window}
            )
        self.conn.initiate_connection()
        await self._flush()
        self._reader_task = asyncio.create_task(self._read(reader))
        return self

    async def _flush(self) -> None:
        assert self._writer is not None
        data = self.conn.data_to_send()
        if data:
            self._writer.write(data)
            await self._writer.drain()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while data := await reader.read(65536):
                for event in self.conn.receive_data(data):
                    self._on_event(event)
                await self._flush()
        except (ConnectionError, h2.exceptions.ProtocolError):
            pass
        finally:
            self.closed.set()
            self.ping_acked.set()
            for st in self.streams.values():
                st.changed.set()

    def _on_event(self, event: h2.events.Event) -> None:
        sid = getattr(event, "stream_id", 0)
        st = self.streams.get(sid) if sid else None
        if isinstance(event, h2.events.ResponseReceived) and st is not None:
            st.headers = dict(event.headers)  # type: ignore[arg-type]
        elif isinstance(event, h2.events.TrailersReceived) and st is not None:
            st.trailers = dict(event.headers)  # type: ignore[arg-type]
        elif isinstance(event, h2.events.DataReceived) and st is not None:
            st.data += event.data or b""
            if st.headers.get("content-type", "").startswith(("application/grpc", "application/connect+")):
                st.messages += st.decoder.feed(event.data or b"")
            if self.auto_ack and event.flow_controlled_length:
                self.conn.acknowledge_received_data(event.flow_controlled_length, sid)
        elif isinstance(event, h2.events.StreamEnded) and st is not None:
            st.ended = True
        elif isinstance(event, h2.events.StreamReset) and st is not None:
            st.reset_code = int(event.error_code or 0)
        else:
            self._on_connection_event(event)
        if st is not None:
            st.changed.set()

    def _on_connection_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = event
        elif isinstance(event, h2.events.WindowUpdated):
            self.window_changed.set()
        elif isinstance(event, h2.events.PingAckReceived):
            self.ping_acks += 1
            self.ping_acked.set()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self.remote_settings.set()
            self.window_changed.set()

    async def open(
        self,
        path: str,
        content_type: str = "application/grpc",
        *,
        extra: dict[str, str] | None = None,
        end: bool = False,
    ) -> int:
        """Send request headers for a POST; returns the stream id."""
        sid = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":authority", "test"),
            (":path", path),
            ("content-type", content_type),
            ("te", "trailers"),
            *(extra or {}).items(),
        ]
        self.streams[sid] = StreamState()
        self.conn.send_headers(sid, headers, end_stream=end)
        await self._flush()
        return sid

    async def send(self, sid: int, data: bytes, *, end: bool = False) -> None:
        """Send body bytes, waiting for flow-control windows as needed."""
        view = memoryview(data)
        while view:
            window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if window <= 0:
                self.window_changed.clear()
                await asyncio.wait_for(self.window_changed.wait(), 20)
                continue
            self.conn.send_data(sid, bytes(view[:window]))
            view = view[window:]
            await self._flush()
        if end:
            self.conn.end_stream(sid)
            await self._flush()

    async def send_msg(
        self, sid: int, msg: pb.WorkerMessage | bytes, *, flags: int = 0, end: bool = False
    ) -> None:
        """Send one length-prefixed message."""
        payload = msg if isinstance(msg, bytes) else msg.SerializeToString()
        await self.send(sid, encode_message(payload, flags), end=end)

    async def end(self, sid: int) -> None:
        self.conn.end_stream(sid)
        await self._flush()

    async def reset(self, sid: int, code: int = 8) -> None:
        self.conn.reset_stream(sid, code)
        await self._flush()

    async def wait(self, sid: int, predicate: object = None, timeout: float = 15.0) -> StreamState:
        """Wait until ``predicate(state)`` (default: stream done)."""
        st = self.streams[sid]
        check = predicate if callable(predicate) else (lambda s: s.done)
        async with asyncio.timeout(timeout):
            while not check(st):
                if self.closed.is_set():
                    raise ConnectionError("connection closed")
                st.changed.clear()
                await st.changed.wait()
        return st

    async def server_messages(self, sid: int, count: int, timeout: float = 15.0) -> list[pb.ServerMessage]:
        """Wait for ``count`` ServerMessages on the stream."""
        st = await self.wait(sid, lambda s: len(s.messages) >= count or s.done, timeout)
        return [pb.ServerMessage.FromString(data) for flags, data in st.messages[:count] if not flags & 0x02]

    async def ping(self, timeout: float = 10.0) -> None:
        """Send a PING and wait for its ACK (proves the connection is alive and served)."""
        before = self.ping_acks
        self.ping_acked.clear()
        self.conn.ping(b"alive?!!")
        await self._flush()
        async with asyncio.timeout(timeout):
            while self.ping_acks == before:
                if self.closed.is_set():
                    raise ConnectionError("connection closed")
                self.ping_acked.clear()
                await self.ping_acked.wait()

    async def open_and_reset(self, path: str) -> int:
        """HEADERS and RST_STREAM for a new stream in one write (the rapid-reset pattern)."""
        sid = self.conn.get_next_available_stream_id()
        self.streams[sid] = StreamState()
        self.conn.send_headers(
            sid,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":authority", "test"),
                (":path", path),
                ("content-type", "application/grpc"),
            ],
        )
        self.conn.reset_stream(sid, 8)
        await self._flush()
        return sid

    async def wait_closed(self, timeout: float = 10.0) -> None:
        """Until the server has closed the connection."""
        await asyncio.wait_for(self.closed.wait(), timeout)

    async def ack(self, sid: int, size: int) -> None:
        self.conn.acknowledge_received_data(size, sid)
        await self._flush()

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await self._writer.wait_closed()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
