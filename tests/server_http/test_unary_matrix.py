"""Unary RPCs across wire formats (gRPC, gRPC-Web, Connect proto/JSON) and HTTP versions; error mapping."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json

import httpx
import pyqwest
import pytest
from connectrpc.errors import ConnectError
from connectrpc.protocol import ProtocolType

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1.service_connect import AdminServiceClient, TaskServiceClient
from conveyor_server_min._http.wire import encode_message

from .fakes import ENQUEUE, ThreadServer
from .h2client import H2Client

MIB = 1 << 20


def _h2_client(url: str, protocol: ProtocolType) -> TaskServiceClient:
    transport = pyqwest.HTTPTransport(http_version=pyqwest.HTTPVersion.HTTP2)
    return TaskServiceClient(url, protocol=protocol, http_client=pyqwest.Client(transport))


@pytest.mark.parametrize("protocol", [ProtocolType.CONNECT, ProtocolType.GRPC], ids=["connect", "grpc"])
def test_connectrpc_client_over_h2c_round_trips_1mib(
    fake_server: ThreadServer, protocol: ProtocolType
) -> None:
    """The generated connectrpc client (gzip-compressed requests) gets a 1 MiB payload echoed over h2c."""

    async def main() -> None:
        client = _h2_client(fake_server.url, protocol)
        resp = await client.enqueue(pb.EnqueueRequest(type="big", queue="q", payload=b"p" * MIB))
        assert resp.task.type == "big" and len(resp.task.payload) == MIB
        small = await client.get_task(pb.GetTaskRequest(id="abc"))
        assert small.task.id == "abc"

    asyncio.run(main())


@pytest.mark.parametrize("protocol", [ProtocolType.CONNECT, ProtocolType.GRPC], ids=["connect", "grpc"])
def test_handler_errors_map_to_codes(fake_server: ThreadServer, protocol: ProtocolType) -> None:
    """ConveyorError keeps its code; an unexpected exception becomes internal; other calls are unaffected."""

    async def main() -> None:
        client = _h2_client(fake_server.url, protocol)
        with pytest.raises(ConnectError) as info:
            await client.enqueue(pb.EnqueueRequest(type="not-found"))
        assert info.value.code.value == "not_found" and "no such thing" in info.value.message
        with pytest.raises(ConnectError) as info:
            await client.enqueue(pb.EnqueueRequest(type="boom"))
        assert info.value.code.value == "internal"
        with pytest.raises(ConnectError) as info:
            await client.get_task(pb.GetTaskRequest())
        assert info.value.code.value == "invalid_argument"
        assert (await client.get_task(pb.GetTaskRequest(id="x"))).task.id == "x"

    asyncio.run(main())


def test_unknown_method_is_unimplemented_over_connect_and_grpc(fake_server: ThreadServer) -> None:
    """A method the ServiceSet lacks fails with unimplemented in both protocols."""

    async def main() -> None:
        for protocol in (ProtocolType.CONNECT, ProtocolType.GRPC):
            transport = pyqwest.HTTPTransport(http_version=pyqwest.HTTPVersion.HTTP2)
            admin = AdminServiceClient(
                fake_server.url, protocol=protocol, http_client=pyqwest.Client(transport)
            )
            with pytest.raises(ConnectError) as info:
                await admin.list_queues(pb.ListQueuesRequest())
            assert info.value.code.value == "unimplemented"

    asyncio.run(main())


def test_connect_proto_and_json_over_http1(fake_server: ThreadServer) -> None:
    """HTTP/1.1 serves Connect unary in binary proto, gzip-compressed proto, and proto3 JSON."""
    url = fake_server.url + ENQUEUE
    with httpx.Client(http2=False) as client:
        body = pb.EnqueueRequest(type="t", queue="q", payload=b"\x00\x01").SerializeToString()
        resp = client.post(url, content=body, headers={"content-type": "application/proto"})
        assert resp.status_code == 200 and resp.http_version == "HTTP/1.1"
        assert resp.headers["content-type"] == "application/proto"
        assert pb.EnqueueResponse.FromString(resp.content).task.payload == b"\x00\x01"
        zipped = client.post(
            url,
            content=gzip.compress(body),
            headers={"content-type": "application/proto", "content-encoding": "gzip"},
        )
        assert pb.EnqueueResponse.FromString(zipped.content).task.queue == "q"
        resp = client.post(url, json={"type": "t", "payload": "AAE=", "maxRetry": 3, "metadata": {"a": "b"}})
        assert resp.status_code == 200
        task = resp.json()["task"]
        assert task["type"] == "t" and task["payload"] == "AAE="


def test_connect_json_errors_use_http_status_and_body(fake_server: ThreadServer) -> None:
    """Connect unary errors carry Code.http_status and {"code","message"}; unknown methods are 501."""
    with httpx.Client() as client:
        resp = client.post(fake_server.url + ENQUEUE, json={"type": "not-found"})
        assert resp.status_code == 404
        assert resp.json() == {"code": "not_found", "message": "no such thing"}
        resp = client.post(fake_server.url + "/conveyor.v1.AdminService/Nope", json={})
        assert resp.status_code == 501 and resp.json()["code"] == "unimplemented"
        resp = client.post(
            fake_server.url + ENQUEUE, content=b"{not json", headers={"content-type": "application/json"}
        )
        assert resp.status_code == 400 and resp.json()["code"] == "invalid_argument"


def test_malformed_protobuf_is_invalid_argument_for_that_call_only(fake_server: ThreadServer) -> None:
    """Garbage protobuf bytes fail that call with invalid_argument; the next call succeeds."""
    with httpx.Client() as client:
        resp = client.post(
            fake_server.url + ENQUEUE, content=b"\xff\xff\xff", headers={"content-type": "application/proto"}
        )
        assert resp.status_code == 400 and resp.json()["code"] == "invalid_argument"
        ok = client.post(fake_server.url + ENQUEUE, json={"type": "fine"})
        assert ok.status_code == 200


def test_wrong_content_type_is_415(fake_server: ThreadServer) -> None:
    """Unsupported content types get 415 (with Accept-Post); a Connect unary type on a stream method too."""
    with httpx.Client() as client:
        resp = client.post(fake_server.url + ENQUEUE, content=b"x", headers={"content-type": "text/xml"})
        assert resp.status_code == 415 and "application/proto" in resp.headers["accept-post"]
        resp = client.post(fake_server.url + ENQUEUE, content=b"x")
        assert resp.status_code == 415
        resp = client.post(
            fake_server.url + "/conveyor.v1.AdminService/WatchEvents",
            json={},
            headers={"content-type": "application/json"},
        )
        assert resp.status_code == 415


def test_grpc_over_http1_is_refused_and_grpc_web_works(fake_server: ThreadServer) -> None:
    """gRPC needs HTTP/2 (unimplemented over HTTP/1.1); gRPC-Web unary works over HTTP/1.1."""
    framed = encode_message(pb.EnqueueRequest(type="web").SerializeToString())
    with httpx.Client() as client:
        resp = client.post(
            fake_server.url + ENQUEUE, content=framed, headers={"content-type": "application/grpc"}
        )
        assert resp.headers["grpc-status"] == "12"
        resp = client.post(
            fake_server.url + ENQUEUE, content=framed, headers={"content-type": "application/grpc-web+proto"}
        )
        assert resp.status_code == 200
        body = resp.content
        length = int.from_bytes(body[1:5], "big")
        assert pb.EnqueueResponse.FromString(body[5 : 5 + length]).task.type == "web"
        trailer = body[5 + length :]
        assert trailer[0] == 0x80 and b"grpc-status: 0" in trailer


def test_health_and_readiness(fake_server: ThreadServer) -> None:
    """/healthz answers 200 "ok" (HEAD: no body); /readyz 200 while serving; unknown paths 404; PUT 405."""
    with httpx.Client() as client:
        assert (
            client.get(fake_server.url + "/healthz").status_code,
            client.get(fake_server.url + "/healthz").text,
        ) == (
            200,
            "ok",
        )
        assert client.get(fake_server.url + "/readyz").status_code == 200
        assert client.get(fake_server.url + "/nope").status_code == 404
        assert client.put(fake_server.url + "/healthz").status_code == 405
        head = client.head(fake_server.url + "/healthz")
        assert head.status_code == 200 and head.content == b""
        assert client.get(fake_server.url + "/healthz").text == "ok"  # the connection is still usable


def test_grpc_raw_bad_bodies(fake_server: ThreadServer) -> None:
    """Over raw h2 gRPC: truncated frame, oversize frame and two messages each fail only their own call."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", fake_server.port)
        try:
            good = encode_message(pb.EnqueueRequest(type="ok").SerializeToString())
            cases = {
                "truncated": (good[:-1], "3"),
                "oversize": (b"\x00" + (6 * MIB).to_bytes(4, "big") + b"x" * 100, "8"),
                "two": (good + good, "3"),
                "garbage": (encode_message(b"\xff\xff"), "3"),
            }
            sids = {}
            for name, (body, _) in cases.items():
                sid = await client.open(ENQUEUE)
                await client.send(sid, body, end=True)
                sids[name] = sid
            for name, (_, code) in cases.items():
                st = await client.wait(sids[name])
                status = st.trailers.get("grpc-status") or st.headers.get("grpc-status")
                assert status == code, (name, st.headers, st.trailers)
            sid = await client.open(ENQUEUE)
            await client.send(sid, good, end=True)
            st = await client.wait(sid)
            assert st.trailers.get("grpc-status") == "0"
            assert pb.EnqueueResponse.FromString(st.messages[0][1]).task.type == "ok"
        finally:
            await client.close()

    asyncio.run(main())


def test_oversize_body_is_rejected_without_buffering_it_all(fake_server: ThreadServer) -> None:
    """A Connect unary body beyond the 5 MiB limit gets resource_exhausted (HTTP/1.1 and HTTP/2)."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", fake_server.port)
        try:
            sid = await client.open(ENQUEUE, "application/proto")
            with contextlib.suppress(Exception):  # the server may reset the stream while we still send
                await client.send(sid, b"\x00" * (6 * MIB), end=True)
            st = await client.wait(sid, lambda s: bool(s.headers))
            assert st.headers[":status"] == "429"
        finally:
            await client.close()

    asyncio.run(main())
    with httpx.Client() as client:
        resp = client.post(
            fake_server.url + ENQUEUE,
            content=b"\x00" * (6 * MIB),
            headers={"content-type": "application/proto"},
        )
        assert resp.status_code == 429 and resp.json()["code"] == "resource_exhausted"
        assert client.post(fake_server.url + ENQUEUE, json={"type": "after"}).status_code == 200


def test_deadline_header_bounds_a_slow_handler(fake_server: ThreadServer) -> None:
    """connect-timeout-ms / grpc-timeout turn a stuck handler into deadline_exceeded."""
    with httpx.Client() as client:
        resp = client.post(
            fake_server.url + ENQUEUE, json={"type": "slow"}, headers={"connect-timeout-ms": "200"}
        )
        assert resp.status_code == 504 and resp.json()["code"] == "deadline_exceeded"

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", fake_server.port)
        try:
            sid = await client.open(ENQUEUE, extra={"grpc-timeout": "200m"})
            await client.send_msg(sid, pb.EnqueueRequest(type="slow").SerializeToString(), end=True)
            st = await client.wait(sid)
            assert (st.trailers or st.headers)["grpc-status"] == "4"
        finally:
            await client.close()

    asyncio.run(main())


def test_connect_json_response_uses_proto3_json_mapping(fake_server: ThreadServer) -> None:
    """JSON responses use lowerCamelCase names and base64 bytes."""
    with httpx.Client() as client:
        resp = client.post(fake_server.url + ENQUEUE, json={"task_id": "abc", "type": "t", "payload": "aGk="})
        data = json.loads(resp.content)
        assert data["task"]["id"] == "abc" and data["task"]["payload"] == "aGk="


def test_connect_server_stream_over_http1_is_chunked(fake_server: ThreadServer) -> None:
    """WatchEvents over HTTP/1.1 (Connect streaming JSON) streams frames with chunked encoding."""
    body = encode_message(b'{"queues":["x"]}')
    headers = {"content-type": "application/connect+json"}
    with httpx.Client() as client:
        resp = client.post(
            fake_server.url + "/conveyor.v1.AdminService/WatchEvents", content=body, headers=headers
        )
    assert resp.status_code == 200 and resp.headers.get("transfer-encoding") == "chunked"
    data, frames = resp.content, []
    while data:
        length = int.from_bytes(data[1:5], "big")
        frames.append((data[0], json.loads(data[5 : 5 + length])))
        data = data[5 + length :]
    assert [f[1]["id"] for f in frames[:-1]] == ["e0", "e1", "e2"]
    assert frames[-1] == (0x02, {})


def test_http1_expect_100_continue(fake_server: ThreadServer) -> None:
    """An HTTP/1.1 client sending ``Expect: 100-continue`` gets ``100 Continue`` before it sends the body."""
    import socket

    body = pb.EnqueueRequest(type="expect").SerializeToString()
    head = (
        f"POST {ENQUEUE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/proto\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", fake_server.port), timeout=10) as sock:
        sock.sendall(head)
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 ")
        sock.sendall(body)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.endswith(b"expect"):
            chunk = sock.recv(65536)
            assert chunk, reply
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200 ")
