"""A counting h2c relay: every byte is forwarded unchanged; HTTP/2 frames and the gRPC messages
inside the DATA frames are counted per direction (sans-I/O :class:`Direction`, fed by the relay).

Only frame headers are parsed (9 bytes: length, type, flags, stream) and DATA payloads are
reassembled per stream into length-prefixed gRPC messages, decoded as ``WorkerMessage``
(worker -> server) or ``ServerMessage`` (server -> worker). HEADERS are not decoded (no HPACK).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_NAMES = {0: "DATA", 1: "HEADERS", 2: "PRIORITY", 3: "RST_STREAM", 4: "SETTINGS", 5: "PUSH_PROMISE",
               6: "PING", 7: "GOAWAY", 8: "WINDOW_UPDATE", 9: "CONTINUATION"}  # fmt: skip
PADDED = 0x8


@dataclass
class Direction:
    """What one side sent: reads (≈ the sender's writes), frames, gRPC messages by kind."""

    decode: Callable[[bytes], Any]
    preface: bool = False  # the client side starts with the connection preface
    reads: int = 0
    bytes: int = 0
    frames: Counter[str] = field(default_factory=Counter)
    messages: Counter[str] = field(default_factory=Counter)
    message_bytes: Counter[str] = field(default_factory=Counter)
    heartbeat_ids: int = 0
    credits: int = 0
    batched_results: int = 0
    data_frames_with_messages: int = 0
    messages_in_data: int = 0
    _buf: bytearray = field(default_factory=bytearray)
    _streams: dict[int, bytearray] = field(default_factory=dict)

    def new_connection(self, *, preface: bool) -> None:
        """A fresh connection: its own framing state (counters go on)."""
        self.preface = preface
        self._buf.clear()
        self._streams.clear()

    def snapshot(self) -> dict[str, Any]:
        """The counters now (subtract two snapshots to count one phase)."""
        names = ("reads", "bytes", "heartbeat_ids", "credits", "batched_results", "data_frames_with_messages",
                 "messages_in_data")  # fmt: skip
        plain = {k: getattr(self, k) for k in names}
        return {**plain, "frames": Counter(self.frames), "messages": Counter(self.messages),
                "message_bytes": Counter(self.message_bytes)}  # fmt: skip

    def feed(self, data: bytes) -> None:
        self.reads += 1
        self.bytes += len(data)
        self._buf += data
        if self.preface:
            if len(self._buf) < len(PREFACE):
                return
            del self._buf[: len(PREFACE)]
            self.preface = False
        while len(self._buf) >= 9:
            length = int.from_bytes(self._buf[:3], "big")
            if len(self._buf) < 9 + length:
                return
            kind, flags = self._buf[3], self._buf[4]
            stream = int.from_bytes(self._buf[5:9], "big") & 0x7FFFFFFF
            payload = bytes(self._buf[9 : 9 + length])
            del self._buf[: 9 + length]
            self.frames[FRAME_NAMES.get(kind, str(kind))] += 1
            if kind == 0:
                if flags & PADDED and payload:
                    payload = payload[1 : len(payload) - payload[0]]
                self._data(stream, payload)

    def _data(self, stream: int, payload: bytes) -> None:
        buf = self._streams.setdefault(stream, bytearray())
        buf += payload
        found = 0
        while len(buf) >= 5:
            size = int.from_bytes(buf[1:5], "big")
            if len(buf) < 5 + size:
                break
            self._message(bytes(buf[5 : 5 + size]))
            del buf[: 5 + size]
            found += 1
        if found:
            self.data_frames_with_messages += 1
            self.messages_in_data += found

    def _message(self, raw: bytes) -> None:
        try:
            msg = self.decode(raw)
            kind = msg.WhichOneof("frame") or "empty"
        except Exception:  # a unary RPC on the same connection: not a session frame
            kind = "other"
            msg = None
        self.messages[kind] += 1
        self.message_bytes[kind] += len(raw) + 5
        if kind == "heartbeat":
            self.heartbeat_ids += len(msg.heartbeat.active_task_ids)
        elif kind == "credit":
            self.credits += msg.credit.n
        elif kind == "batch_result":
            self.batched_results += len(msg.batch_result.results)


class Relay:
    """Listen on a free loopback port; relay each connection to ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int], worker_side: Direction, server_side: Direction) -> None:
        self.upstream = upstream
        self.up, self.down = worker_side, server_side
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.up.new_connection(preface=True)
        self.down.new_connection(preface=False)
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        pumps = [
            asyncio.ensure_future(self._pump(reader, up_writer, self.up)),
            asyncio.ensure_future(self._pump(up_reader, writer, self.down)),
        ]
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        for w in (writer, up_writer):
            w.close()

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, count: Direction) -> None:
        while data := await src.read(1 << 16):
            count.feed(data)
            dst.write(data)
            await dst.drain()
