"""Session and server streams over raw HTTP/2: gRPC and Connect framing, resets, flow control, bad input."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket

import h2.settings
import httpx
import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_server_min._http import h2stream
from conveyor_server_min._http.h2conn import HIGH_WATER, H2Connection
from conveyor_server_min._http.wire import encode_message

from .._util import wait_until
from .fakes import ENQUEUE, SESSION, WATCH, FakeServices, ThreadServer
from .h2client import H2Client

MIB = 1 << 20


def _largest_send_buffer(server: ThreadServer) -> int:
    """Bytes queued server-side for the fullest stream (runs on the server loop)."""
    assert server.server is not None and server.server._hub is not None
    sizes = [0]
    for conn in server.server._hub.connections:
        impl = conn.impl
        if isinstance(impl, H2Connection):
            sizes += [len(st.out) for st in impl.streams.values()]
    return max(sizes)


def _hello(**labels: str) -> pb.WorkerMessage:
    return pb.WorkerMessage(hello=pb.Hello(queues={"q": 1}, concurrency=4, labels=labels))


def _result(task_id: str) -> pb.WorkerMessage:
    return pb.WorkerMessage(result=pb.Result(task_id=task_id, outcome=pb.TASK_OUTCOME_SUCCESS))


async def _ok_call(port: int) -> None:
    """Another client on a fresh connection still gets a normal answer."""
    client = await H2Client().connect("127.0.0.1", port)
    try:
        sid = await client.open(ENQUEUE)
        await client.send_msg(sid, pb.EnqueueRequest(type="still-ok").SerializeToString(), end=True)
        st = await client.wait(sid)
        assert st.trailers.get("grpc-status") == "0"
    finally:
        await client.close()


@pytest.fixture
def server() -> ThreadServer:
    """A fresh in-thread server per test, so session bookkeeping starts empty."""
    srv = ThreadServer(FakeServices())
    with srv:
        yield srv


def test_grpc_session_welcome_dispatch_result_and_clean_end(server: ThreadServer) -> None:
    """gRPC Session: Hello -> Welcome + Dispatches; Results reach the handler; half-close ends with OK."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        sid = await client.open(SESSION)
        await client.send_msg(sid, _hello(dispatch="3"))
        msgs = await client.server_messages(sid, 4)
        assert msgs[0].WhichOneof("frame") == "welcome"
        assert [m.dispatch.task.id for m in msgs[1:]] == ["task-0", "task-1", "task-2"]
        assert client.streams[sid].headers["content-type"] == "application/grpc"
        for m in msgs[1:]:
            await client.send_msg(sid, _result(m.dispatch.task.id))
        await client.end(sid)
        st = await client.wait(sid)
        assert st.trailers == {"grpc-status": "0"}
        await client.close()

    asyncio.run(main())
    assert server.services.results == ["task-0", "task-1", "task-2"]
    assert server.services.ended == ["clean"]


def test_connect_streaming_session_ends_with_end_stream_frame(server: ThreadServer) -> None:
    """Connect streaming Session: frames in application/connect+proto, clean end = flag 0x02 with {}."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        sid = await client.open(SESSION, "application/connect+proto", extra={"connect-protocol-version": "1"})
        await client.send_msg(sid, _hello(dispatch="1"))
        msgs = await client.server_messages(sid, 2)
        assert msgs[1].dispatch.task.id == "task-0"
        await client.send_msg(sid, _result("task-0"))
        await client.end(sid)
        st = await client.wait(sid)
        assert st.headers[":status"] == "200" and st.headers["content-type"] == "application/connect+proto"
        flags, payload = st.messages[-1]
        assert flags == 0x02 and json.loads(payload) == {}
        await client.close()

    asyncio.run(main())
    assert server.services.results == ["task-0"]


def test_session_errors_use_each_protocols_status_channel(server: ThreadServer) -> None:
    """A non-Hello first frame fails invalid_argument: Trailers-Only (gRPC), end-stream error (Connect)."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        bad = pb.WorkerMessage(heartbeat=pb.Heartbeat())
        sid = await client.open(SESSION)
        await client.send_msg(sid, bad)
        st = await client.wait(sid)
        assert st.headers["grpc-status"] == "3" and "Hello" in st.headers["grpc-message"]
        sid = await client.open(SESSION, "application/connect+proto")
        await client.send_msg(sid, bad)
        st = await client.wait(sid)
        flags, payload = st.messages[-1]
        assert flags == 0x02 and json.loads(payload)["error"]["code"] == "invalid_argument"
        await client.close()

    asyncio.run(main())


def test_malformed_and_truncated_session_frames_fail_only_that_stream(server: ThreadServer) -> None:
    """Garbage protobuf and a stream ending mid-frame fail their session with invalid_argument."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        garbage = await client.open(SESSION)
        await client.send_msg(garbage, b"\xff\xff\xff")
        truncated = await client.open(SESSION)
        await client.send(truncated, encode_message(_hello().SerializeToString())[:-2], end=True)
        for sid in (garbage, truncated):
            st = await client.wait(sid)
            assert (st.trailers or st.headers)["grpc-status"] == "3", st
        await client.close()
        await _ok_call(server.port)

    asyncio.run(main())


def test_watch_events_server_stream_grpc_and_connect(server: ThreadServer) -> None:
    """WatchEvents streams every event then ends OK, in gRPC and in Connect streaming."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        req = pb.WatchEventsRequest(queues=["a", "b"]).SerializeToString()
        for ctype in ("application/grpc", "application/connect+proto"):
            sid = await client.open(WATCH, ctype)
            await client.send_msg(sid, req, end=True)
            st = await client.wait(sid)
            events = [tpb.TaskEvent.FromString(d) for f, d in st.messages if not f & 0x02]
            assert [e.id for e in events] == ["e0", "e1", "e2"] and events[0].queue == "a,b"
        await client.close()

    asyncio.run(main())


def test_rst_stream_cancels_the_session_handler(server: ThreadServer) -> None:
    """RST_STREAM from the worker cancels that stream's handler; the connection keeps serving."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        sid = await client.open(SESSION)
        await client.send_msg(sid, _hello())
        await client.server_messages(sid, 1)
        await client.reset(sid)
        await asyncio.to_thread(wait_until, lambda: server.services.ended == ["cancelled"], 10)
        sid2 = await client.open(ENQUEUE)
        await client.send_msg(sid2, pb.EnqueueRequest(type="x").SerializeToString(), end=True)
        assert (await client.wait(sid2)).trailers["grpc-status"] == "0"
        await client.close()

    asyncio.run(main())


def test_connection_loss_cancels_handlers(server: ThreadServer) -> None:
    """Dropping the TCP connection cancels every session handler on it."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        for _ in range(3):
            sid = await client.open(SESSION)
            await client.send_msg(sid, _hello())
            await client.server_messages(sid, 1)
        await client.close()
        await asyncio.to_thread(wait_until, lambda: server.services.ended == ["cancelled"] * 3, 10)

    asyncio.run(main())


def test_large_dispatches_respect_a_small_client_window(server: ThreadServer) -> None:
    """Eight 1 MiB Dispatches reach a client with a 64 KiB window: the server waits for WINDOW_UPDATEs."""

    async def main() -> None:
        client = await H2Client(window=65535).connect("127.0.0.1", server.port)
        sid = await client.open(SESSION)
        await client.send_msg(sid, _hello(dispatch="8", size=str(MIB)))
        msgs = await client.server_messages(sid, 9, timeout=60)
        assert [len(m.dispatch.task.payload) for m in msgs[1:]] == [MIB] * 8
        big = pb.WorkerMessage(result=pb.Result(task_id="task-0", outcome=1, result=b"r" * MIB))
        await client.send_msg(sid, big)
        await client.end(sid)
        assert (await client.wait(sid)).trailers["grpc-status"] == "0"
        await client.close()

    asyncio.run(main())
    assert server.services.results == ["task-0"]


def test_client_that_never_reads_does_not_hurt_others(server: ThreadServer) -> None:
    """A session that never returns window credit is held back alone; another session flows normally."""

    async def main() -> None:
        stuck = await H2Client(auto_ack=False).connect("127.0.0.1", server.port)
        sid = await stuck.open(SESSION)
        await stuck.send_msg(sid, _hello(dispatch="64", size=str(256 * 1024)))
        healthy = await H2Client().connect("127.0.0.1", server.port)
        sid2 = await healthy.open(SESSION)
        await healthy.send_msg(sid2, _hello(dispatch="16", size=str(256 * 1024)))
        msgs = await healthy.server_messages(sid2, 17, timeout=30)
        assert len(msgs) == 17
        # The stuck stream received at most its window (64 KiB default); the rest waits server-side, bounded.
        assert len(stuck.streams[sid].data) <= 65535
        assert server.call(lambda: _largest_send_buffer(server)) <= HIGH_WATER + 256 * 1024 + 64
        await healthy.end(sid2)
        await healthy.wait(sid2)
        await healthy.close()
        await stuck.close()
        await _ok_call(server.port)

    asyncio.run(main())


def test_many_sessions_and_calls_on_one_connection(server: ThreadServer) -> None:
    """Fifty concurrent sessions plus unary calls multiplex on one connection without interference."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        sids = []
        for i in range(50):
            sid = await client.open(SESSION)
            await client.send_msg(sid, _hello(dispatch="1"))
            sids.append(sid)
            if i % 10 == 0:
                usid = await client.open(ENQUEUE)
                await client.send_msg(usid, pb.EnqueueRequest(type="u").SerializeToString(), end=True)
        for sid in sids:
            msgs = await client.server_messages(sid, 2)
            await client.send_msg(sid, _result(msgs[1].dispatch.task.id), end=True)
        for sid in sids:
            assert (await client.wait(sid)).trailers["grpc-status"] == "0"
        await client.close()

    asyncio.run(main())
    assert len(server.services.results) == 50 and server.services.ended == ["clean"] * 50


def test_stream_flood_is_refused_not_fatal(server: ThreadServer) -> None:
    """Streams beyond MAX_CONCURRENT_STREAMS (100) get REFUSED_STREAM; the connection and server live on."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        await asyncio.wait_for(client.remote_settings.wait(), 10)
        assert client.conn.remote_settings.max_concurrent_streams == 100
        # Misbehave on purpose: ignore the advertised limit (as if the server had announced 5000).
        codes = h2.settings.SettingCodes
        client.conn.remote_settings[codes.MAX_CONCURRENT_STREAMS] = 5000
        client.conn.remote_settings.acknowledge()
        sids = []
        for _ in range(200):
            sid = await client.open(SESSION)
            sids.append(sid)
        refused = 0
        for sid in sids[100:]:
            st = await client.wait(sid, lambda s: s.reset_code is not None, timeout=30)
            refused += st.reset_code == 7
        assert refused == 100
        for sid in sids[:3]:
            await client.send_msg(sid, _hello())
            msgs = await client.server_messages(sid, 1)
            assert msgs[0].WhichOneof("frame") == "welcome"
        await client.close()
        await _ok_call(server.port)

    asyncio.run(main())


def test_garbage_bytes_close_the_connection_and_server_stays_fine(server: ThreadServer) -> None:
    """Random bytes instead of HTTP get the connection closed; the server keeps serving."""
    for junk in (b"\x16\x03\x01\x02\x00garbage" * 10, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 64):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass  # until the server closes
    assert httpx.get(server.url + "/healthz").text == "ok"
    asyncio.run(_ok_call(server.port))


def test_late_frames_and_missing_trailers_do_not_leak(server: ThreadServer) -> None:
    """Data after a stream finished, and a client stream ending without a message, affect only themselves."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        sid = await client.open(SESSION, end=True)  # no frames at all: clean end, no Hello
        st = await client.wait(sid)
        assert (st.trailers or st.headers)["grpc-status"] == "0"
        sid = await client.open(ENQUEUE)
        await client.send_msg(sid, pb.EnqueueRequest(type="x").SerializeToString(), end=True)
        await client.wait(sid)
        # A late frame on the finished stream: the server must answer RST/ignore, nothing else.
        try:
            client.conn.send_data(sid, b"late")
        except Exception:  # h2 may refuse locally; write raw instead
            from hyperframe.frame import DataFrame

            frame = DataFrame(sid)
            frame.data = b"late"
            client._writer.write(frame.serialize())  # type: ignore[union-attr]
        sid2 = await client.open(ENQUEUE)
        await client.send_msg(sid2, pb.EnqueueRequest(type="y").SerializeToString(), end=True)
        assert (await client.wait(sid2)).trailers["grpc-status"] == "0"
        await client.close()

    asyncio.run(main())
    assert "clean" in server.services.ended


def test_more_than_1000_streams_over_one_connection(server: ThreadServer) -> None:
    """The stream-count cap is on concurrency only: 1500 calls in waves of 100 share one connection."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        body = pb.EnqueueRequest(type="w").SerializeToString()
        for _ in range(15):
            sids = []
            for _ in range(100):
                sid = await client.open(ENQUEUE)
                await client.send_msg(sid, body, end=True)
                sids.append(sid)
            for sid in sids:
                assert (await client.wait(sid)).trailers["grpc-status"] == "0"
                del client.streams[sid]
        assert client.conn.highest_outbound_stream_id >= 2999
        await client.close()

    asyncio.run(main())


def test_json_codecs_for_session_and_grpc_unary(server: ThreadServer) -> None:
    """Connect streaming with +json and gRPC with +json carry proto3 JSON messages."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        sid = await client.open(SESSION, "application/connect+json")
        await client.send_msg(
            sid, b'{"hello": {"queues": {"q": 1}, "concurrency": 1, "labels": {"dispatch": "1"}}}'
        )
        st = await client.wait(sid, lambda s: len(s.messages) >= 2)
        assert json.loads(st.messages[0][1]) == {"welcome": {"sessionId": "s-1"}}
        assert json.loads(st.messages[1][1])["dispatch"]["task"]["id"] == "task-0"
        await client.send_msg(
            sid, b'{"result": {"taskId": "task-0", "outcome": "TASK_OUTCOME_SUCCESS"}}', end=True
        )
        st = await client.wait(sid)
        assert st.messages[-1] == (0x02, b"{}")
        usid = await client.open(ENQUEUE, "application/grpc+json")
        await client.send_msg(usid, b'{"type": "json-grpc", "maxRetry": 2}', end=True)
        st = await client.wait(usid)
        assert st.headers["content-type"] == "application/grpc+json" and st.trailers["grpc-status"] == "0"
        assert json.loads(st.messages[0][1])["task"]["type"] == "json-grpc"
        await client.close()

    asyncio.run(main())
    assert server.services.results == ["task-0"]


def test_unanswered_request_bytes_are_bounded_per_connection(
    server: ThreadServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parallel uploads beyond the connection budget fail resource_exhausted; the others complete."""
    monkeypatch.setattr(h2stream, "BODY_BUDGET", 8 * MIB)  # 64 MiB in production; smaller keeps this fast

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", server.port)
        body = pb.EnqueueRequest(type="up", payload=b"u" * (MIB - 100)).SerializeToString()
        sids = []
        for _ in range(10):  # 10 x ~1 MiB held open > 8 MiB
            sid = await client.open(ENQUEUE, "application/proto")
            with contextlib.suppress(Exception):  # a refused stream may be reset while we send
                await client.send(sid, body[:-1])
            sids.append(sid)
        statuses = {}
        for sid in sids:
            st = client.streams[sid]
            if not st.headers and not st.done:
                await client.send(sid, body[-1:], end=True)
            st = await client.wait(sid, lambda s: bool(s.headers))
            statuses[sid] = st.headers[":status"]
        codes = list(statuses.values())
        assert set(codes) == {"200", "429"} and codes.count("200") >= 7, statuses
        await client.close()
        await _ok_call(server.port)

    asyncio.run(main())


def test_reset_of_a_finished_but_unflushed_response_frees_the_stream(server: ThreadServer) -> None:
    """A response stuck behind a zero window is dropped when the client resets; the stream is forgotten."""

    async def main() -> None:
        client = await H2Client(auto_ack=False).connect("127.0.0.1", server.port)
        sid = await client.open(ENQUEUE)
        body = pb.EnqueueRequest(type="big", payload=b"b" * (200 * 1024)).SerializeToString()
        await client.send_msg(sid, body, end=True)  # response < HIGH_WATER: the handler finishes
        await client.wait(sid, lambda s: len(s.data) >= 65535 - 16384)
        assert server.server is not None
        assert server.call(server.server.statistics)["streams"] == 1
        await client.reset(sid)
        await asyncio.to_thread(
            wait_until,
            lambda: server.call(server.server.statistics)["streams"] == 0,
            10,  # type: ignore[union-attr]
        )
        await client.close()

    asyncio.run(main())
