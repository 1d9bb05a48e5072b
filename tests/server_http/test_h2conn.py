"""H2Connection without a socket: what reading a request body sends back to the client."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.events

from conveyor_server_min._http.h2conn import STREAM_WINDOW, H2Connection


class _Transport:
    """Records writes; everything else is a no-op."""

    def __init__(self) -> None:
        self.written = bytearray()

    def write(self, data: bytes) -> None:
        self.written += data

    def get_write_buffer_size(self) -> int:
        return 0

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


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
        transport, router = _Transport(), _Reader(body := STREAM_WINDOW * 3 // 4)  # h2 reopens beyond half
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
