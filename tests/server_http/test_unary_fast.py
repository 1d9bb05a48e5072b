"""The unary answer fast path (the kernel's send_unary) leaves what h2's own send path leaves."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from conveyor_sdk._h2kernel.server_conn import new_server_h2, send_unary
from conveyor_sdk._h2kernel.streams import retire_closed
from conveyor_sdk._transport._connect import parse_target
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_server_min.config import ServerConfig
from conveyor_server_min.server import Server

CT = "application/proto"
REQUEST = [(":method", "POST"), (":scheme", "http"), (":path", "/conveyor.v1.TaskService/Enqueue"),
           (":authority", "a"), ("content-type", CT)]  # fmt: skip


def _pair(
    *, end: bool = True, settings: dict[int, int] | None = None
) -> tuple[h2.connection.H2Connection, list[h2.connection.H2Connection]]:
    """A client and two servers (one for each path) that read the same request on stream 1."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    if settings:
        client.update_settings(settings)
    client.send_headers(1, REQUEST)
    client.send_data(1, b"request", end_stream=end)
    data = client.data_to_send()
    servers = [
        new_server_h2(max_streams=8, stream_window=1 << 20, max_header_bytes=4096, max_empty_frames=4)[0]
        for _ in range(2)
    ]
    for conn in servers:
        conn.initiate_connection()
        conn.receive_data(data)
    client.receive_data(servers[0].data_to_send())
    servers[1].data_to_send()
    acks = client.data_to_send()  # the client's SETTINGS ACK
    for conn in servers:
        conn.receive_data(acks)
        conn.data_to_send()
    return client, servers


def _h2_path(conn: h2.connection.H2Connection, body: bytes) -> None:
    conn.send_headers(1, [(":status", "200"), ("content-type", CT), ("content-length", str(len(body)))])
    conn.send_data(1, body, end_stream=True)


def _state(conn: h2.connection.H2Connection) -> tuple[Any, ...]:
    stream = conn.streams.get(1)
    machine = None if stream is None else vars(stream.state_machine)
    return (
        conn.outbound_flow_control_window,
        conn.state_machine.state,
        None if stream is None else stream.outbound_flow_control_window,
        machine,
    )


def _seen(client: h2.connection.H2Connection, data: bytes) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for event in client.receive_data(data):
        if isinstance(event, h2.events.ResponseReceived):
            out.append(("headers", [(bytes(k), bytes(v)) for k, v in event.headers or ()]))
        elif isinstance(event, h2.events.DataReceived):
            out.append(("data", event.data))
        elif isinstance(event, h2.events.StreamEnded):
            out.append(("end", event.stream_id))
    return out


@pytest.mark.parametrize("size", [0, 1, 37, 16_384])
@pytest.mark.h2_fast
def test_send_unary_matches_h2s_headers_and_data(size: int) -> None:
    """The client reads the same response, and the stream is left CLOSED by SEND_END_STREAM with the
    same windows, as after h2's send_headers + send_data(end_stream=True)."""
    client, (fast, slow) = _pair()
    body = b"r" * size
    assert send_unary(fast, 1, CT, body)
    _h2_path(slow, body)
    assert _state(fast) == _state(slow)
    twin = _pair()[0]  # a second client with the same history reads h2's bytes
    assert _seen(client, fast.data_to_send()) == _seen(twin, slow.data_to_send())
    for conn in (fast, slow):
        retire_closed(conn)
        assert 1 not in conn.streams


@pytest.mark.h2_fast
def test_later_h2_headers_still_decode_after_the_fast_path() -> None:
    """The fast path's literals leave HPACK state alone: h2's next response on the connection decodes."""
    client, (fast, _) = _pair()
    assert send_unary(fast, 1, CT, b"one")
    client.receive_data(fast.data_to_send())
    client.send_headers(3, REQUEST, end_stream=True)
    fast.receive_data(client.data_to_send())
    _h2_path_on(fast, 3, b"two")
    seen = [e for e in client.receive_data(fast.data_to_send()) if isinstance(e, h2.events.ResponseReceived)]
    assert dict(seen[0].headers or ())[b"content-length"] == b"3"


def _h2_path_on(conn: h2.connection.H2Connection, sid: int, body: bytes) -> None:
    conn.send_headers(sid, [(":status", "200"), ("content-type", CT), ("content-length", str(len(body)))])
    conn.send_data(sid, body, end_stream=True)


@pytest.mark.parametrize(
    "case",
    ["request still open", "body over the stream window", "body over the frame size", "table resized"],
)
def test_anything_unusual_is_left_to_h2(case: str) -> None:
    """send_unary declines (False) and changes nothing; h2's path then answers as usual."""
    settings = {
        "body over the stream window": {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 10},
        "table resized": {h2.settings.SettingCodes.HEADER_TABLE_SIZE: 256},
    }.get(case)
    _client, (fast, slow) = _pair(end=case != "request still open", settings=settings)
    body = b"x" * (20_000 if case == "body over the frame size" else 40)
    before = _state(fast)
    assert not send_unary(fast, 1, CT, body)
    assert _state(fast) == before and fast.data_to_send() == b""
    assert _state(fast) == _state(slow)


@pytest.mark.h2_fast
def test_a_second_response_on_the_stream_is_left_to_h2() -> None:
    _client, (fast, _) = _pair()
    assert send_unary(fast, 1, CT, b"a")
    assert not send_unary(fast, 1, CT, b"b")


@pytest.mark.h2_fast
def test_the_server_answers_connect_unary_calls_through_the_fast_path() -> None:
    """A real server's Connect unary answers arrive as literals that never index the HPACK table
    (h2's own encoder would index content-type and content-length), and each one decodes."""
    from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    headers = [(":method", "POST"), (":scheme", "http"), (":path", "/conveyor.v1.TaskService/Enqueue"),
               (":authority", "a"), ("content-type", CT), ("connect-protocol-version", "1")]  # fmt: skip
    answers: list[bytes] = []

    async def main() -> None:
        inbox: asyncio.Queue[bytes] = asyncio.Queue()

        class Sink(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                inbox.put_nowait(data)

            def connection_lost(self, exc: Exception | None) -> None:
                inbox.put_nowait(b"")

        async with MemoryServer(
            Server(ServerConfig(dev=True))
        ) as server:  # the server's own connection code, no socket
            target = parse_target(server.url)
            transport, _ = await server.dial(Sink, target, tls=None, server_hostname=None)
            for i in range(3):
                sid = 1 + 2 * i
                body = pb.EnqueueRequest(type="noop", queue="fastpath").SerializeToString()
                client.send_headers(sid, headers)
                client.send_data(sid, body, end_stream=True)
                transport.write(client.data_to_send())
                ended = False
                while not ended:
                    data = await asyncio.wait_for(inbox.get(), 10)
                    assert data, "server closed the connection"
                    for event in client.receive_data(data):
                        if isinstance(event, h2.events.ResponseReceived):
                            assert dict(event.headers or ())[b":status"] == b"200"
                        elif isinstance(event, h2.events.DataReceived):
                            answers.append(event.data or b"")
                        elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
                            ended = True
                    transport.write(client.data_to_send())
            transport.close()

    asyncio.run(main())
    assert [pb.EnqueueResponse.FromString(a).task.type for a in answers] == ["noop"] * 3
    assert list(client.decoder.header_table.dynamic_entries) == []


def test_the_public_path_leaves_every_answer_to_h2(monkeypatch: pytest.MonkeyPatch) -> None:
    from conveyor_sdk._h2kernel import probe

    monkeypatch.setattr(probe, "fast", False)
    _client, (fast, slow) = _pair()
    assert not send_unary(fast, 1, CT, b"abc")
    assert _state(fast) == _state(slow) and fast.data_to_send() == b""
