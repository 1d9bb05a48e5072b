"""A real HTTP/2 server (asyncio + h2) answering unary Connect and gRPC calls, with extra knobs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.connection import ConnectionState

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb


@dataclass
class Knobs:
    """How the peer behaves: stream limit, answer delay, silence, GOAWAY after n answers."""

    max_streams: int = 100
    delay: float = 0.0
    answer: bool = True
    goaway_after: int | None = None  # answer this many calls, then GOAWAY(last = highest answered)
    reply: tuple[int, list[tuple[str, str]], bytes] | None = None  # (status, headers, body) instead
    trailers: list[tuple[str, str]] | None = None  # with ``reply``: sent after the body (gRPC status)


@dataclass
class Seen:
    """What the peer observed."""

    connections: int = 0
    requests: list[dict[str, str]] = field(default_factory=list)
    resets: list[int] = field(default_factory=list)  # RST_STREAM error codes from the client
    peak_open: int = 0
    answered: int = 0


class UnaryPeer:
    """Answers every request with an EnqueueResponse whose task id counts the calls."""

    def __init__(self, knobs: Knobs | None = None) -> None:
        self.knobs = knobs or Knobs()
        self.reset_seen = asyncio.Event()  # set by the first RST_STREAM from the client
        self.seen = Seen()
        self.url = ""
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> UnaryPeer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.seen.connections += 1
        self._writers.append(writer)
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        conn = h2.connection.H2Connection(config=config)
        conn.local_settings = h2.settings.Settings(
            client=False,
            initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.knobs.max_streams},
        )
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        open_streams: set[int] = set()
        while data := await reader.read(65536):
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError:  # after our GOAWAY h2 refuses further frames
                break
            for event in events:
                if isinstance(event, h2.events.RequestReceived):
                    self.seen.requests.append(dict(event.headers or []))  # type: ignore[arg-type]
                    open_streams.add(event.stream_id)
                    self.seen.peak_open = max(self.seen.peak_open, len(open_streams))
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id or 0)
                elif isinstance(event, h2.events.StreamEnded) and self.knobs.answer:
                    task = asyncio.create_task(self._answer(conn, writer, event.stream_id or 0, open_streams))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                elif isinstance(event, h2.events.StreamReset):
                    self.seen.resets.append(int(event.error_code or 0))
                    self.reset_seen.set()
                    open_streams.discard(event.stream_id or 0)
            writer.write(conn.data_to_send())

    async def _answer(
        self, conn: h2.connection.H2Connection, writer: asyncio.StreamWriter, sid: int, open_streams: set[int]
    ) -> None:
        if self.knobs.delay:
            await asyncio.sleep(self.knobs.delay)
        if (
            sid not in open_streams
            or writer.is_closing()
            or conn.state_machine.state is ConnectionState.CLOSED
        ):
            return
        self.seen.answered += 1
        resp = pb.EnqueueResponse()
        resp.task.id = f"t-{self.seen.answered}"
        resp.task.type = "peer"
        resp.task.queue = "default"
        if self.knobs.reply is not None:
            status, headers, body = self.knobs.reply
            trailers = self.knobs.trailers
            conn.send_headers(sid, [(":status", str(status)), *headers], end_stream=not body and not trailers)
            step = conn.max_outbound_frame_size
            for at in range(0, len(body), step):
                last = at + step >= len(body) and not trailers
                conn.send_data(sid, body[at : at + step], end_stream=last)
            if trailers:
                conn.send_headers(sid, trailers, end_stream=True)
        else:
            conn.send_headers(sid, [(":status", "200"), ("content-type", "application/proto")])
            conn.send_data(sid, resp.SerializeToString(), end_stream=True)
        open_streams.discard(sid)
        if self.knobs.goaway_after is not None and self.seen.answered >= self.knobs.goaway_after:
            conn.close_connection(last_stream_id=sid)
        writer.write(conn.data_to_send())
