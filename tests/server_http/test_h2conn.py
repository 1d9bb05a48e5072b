"""H2Connection without a socket: what reading a request body sends back to the client."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings

from conveyor_sdk._h2kernel.streams import retired_streams
from conveyor_server_min._http.h2conn import STREAM_WINDOW, H2Connection
from conveyor_server_min._http.limits import HttpLimits
from conveyor_server_min._http.reply import plain_response
from tests.server_http.fakes import RecordingTransport


class _Reader:
    """A router whose handler reads ``want`` body bytes when ``go`` is set, then waits."""

    def __init__(self, want: int) -> None:
        self.want = want
        self.go = asyncio.Event()
        self.read = 0

    def runs_inline(self, io: Any) -> bool:
        return False

    async def handle(self, io: Any) -> None:
        await self.go.wait()
        while self.read < self.want:
            chunk = await io.read_chunk()
            assert chunk is not None
            self.read += len(chunk)
        await asyncio.Event().wait()


async def _until(predicate: Any, timeout: float = 5.0) -> None:
    """Let the loop run until ``predicate()`` holds; fail after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - met by transport callbacks, not an event we own
            await asyncio.sleep(0)


def test_a_window_update_due_after_the_last_read_is_written() -> None:
    """A handler that consumes a large body after it all arrived gets the client's window reopened
    at once (WINDOW_UPDATE), though no read of the socket follows to carry it out."""

    async def main() -> None:
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        transport, router = (
            RecordingTransport(),
            _Reader(body := STREAM_WINDOW * 3 // 4),
        )  # h2 reopens beyond half
        conn = H2Connection(transport, router, "peer")  # type: ignore[arg-type]
        conn.start(client.data_to_send())
        client.receive_data(bytes(transport.written))  # our SETTINGS: the 1 MiB stream window
        transport.written.clear()
        client.send_headers(
            1, [(":method", "POST"), (":scheme", "http"), (":path", "/p"), (":authority", "a")]
        )
        for start in range(0, body, 16384):
            client.send_data(1, b"b" * min(16384, body - start))
        conn.data_received(client.data_to_send())
        await _until(lambda: bool(conn.tasks))  # the handler started and waits for ``go``
        client.receive_data(bytes(transport.written))
        transport.written.clear()
        router.go.set()
        await _until(lambda: router.read == body and bool(transport.written))
        events = client.receive_data(bytes(transport.written))
        assert [e.stream_id for e in events if isinstance(e, h2.events.WindowUpdated)] == [1]
        for task in conn.tasks:
            task.cancel()

    asyncio.run(main())


class _Answering:
    """A router that answers every request at once, in the read that completed it."""

    def runs_inline(self, io: Any) -> bool:
        return True

    async def handle(self, io: Any) -> None:
        plain_response(io, 200, "ok")


def _request(client: h2.connection.H2Connection) -> None:
    sid = client.get_next_available_stream_id()
    headers = [(":method", "POST"), (":scheme", "http"), (":path", "/p"), (":authority", "a")]
    client.send_headers(sid, headers, end_stream=True)


def test_answered_streams_are_retired_after_each_read() -> None:
    """The request fast path does not count open streams while few are held; the connection retires
    the closed ones after its write, so h2's stream table does not grow with the requests served."""

    async def main() -> None:
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        transport = RecordingTransport()
        conn = H2Connection(transport, _Answering(), "peer")  # type: ignore[arg-type]
        conn.start(client.data_to_send())
        client.receive_data(bytes(transport.written))
        for _ in range(50):
            transport.written.clear()
            _request(client)
            conn.data_received(client.data_to_send())
            events = client.receive_data(bytes(transport.written))
            assert any(isinstance(e, h2.events.StreamEnded) for e in events)
            assert not conn.h2.streams  # the answered stream left h2's table in its own read
        assert retired_streams(conn.h2) == 50
        assert conn.h2.highest_inbound_stream_id == 99

    asyncio.run(main())


def test_streams_beyond_the_limit_are_still_refused() -> None:
    """With as many streams held open as announced, the next one is refused (REFUSED_STREAM)."""

    async def main() -> None:
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        transport, router = RecordingTransport(), _Reader(0)
        limits = HttpLimits(max_streams=4)
        conn = H2Connection(transport, router, "peer", limits=limits)  # type: ignore[arg-type]
        conn.start(client.data_to_send())
        client.receive_data(bytes(transport.written))
        conn.data_received(client.data_to_send())  # our SETTINGS acknowledged: the limit is in force
        client.remote_settings[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = 100  # a client that
        client.remote_settings.acknowledge()  # ignores the limit, so that the server must refuse
        resets = []
        for _ in range(5):
            transport.written.clear()
            _request(client)
            conn.data_received(client.data_to_send())
            events = client.receive_data(bytes(transport.written))
            resets += [(e.stream_id, e.error_code) for e in events if isinstance(e, h2.events.StreamReset)]
        assert resets == [(9, h2.errors.ErrorCodes.REFUSED_STREAM)]
        for task in conn.tasks:
            task.cancel()

    asyncio.run(main())
