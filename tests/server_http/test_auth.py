"""Bearer-token auth on unary calls and the Session stream (checked at stream open, before any frame)."""

from __future__ import annotations

import asyncio

import httpx
import pyqwest
import pytest
from connectrpc.errors import ConnectError
from connectrpc.protocol import ProtocolType

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1.service_connect import TaskServiceClient
from conveyor_server_min._http.auth import Authenticator

from .fakes import ENQUEUE, SESSION, ThreadServer
from .h2client import H2Client, StreamState

BAD_HEADERS = [
    {},
    {"authorization": "Bearer wrong"},
    {"authorization": "bearer s3cret"},
    {"authorization": "Bearer  s3cret"},
    {"authorization": "Basic s3cret"},
]


@pytest.mark.parametrize("headers", BAD_HEADERS, ids=lambda h: h.get("authorization", "none"))
def test_connect_unary_rejects_missing_or_invalid_token(
    auth_server: ThreadServer, headers: dict[str, str]
) -> None:
    """Connect unary without an exact ``Bearer <token>`` gets 401 unauthenticated, upstream's message."""
    resp = httpx.post(auth_server.url + ENQUEUE, json={"type": "t"}, headers=headers)
    assert resp.status_code == 401
    assert resp.json() == {"code": "unauthenticated", "message": "missing or invalid bearer token"}


def test_every_configured_token_is_accepted(auth_server: ThreadServer) -> None:
    """Each configured token works; the handler sees the call."""
    for token in ("s3cret", "other"):
        resp = httpx.post(
            auth_server.url + ENQUEUE, json={"type": "t"}, headers={"authorization": f"Bearer {token}"}
        )
        assert resp.status_code == 200


@pytest.mark.parametrize("protocol", [ProtocolType.CONNECT, ProtocolType.GRPC], ids=["connect", "grpc"])
def test_generated_client_auth(auth_server: ThreadServer, protocol: ProtocolType) -> None:
    """The connectrpc client is rejected without a token and accepted with one, over h2c."""

    async def main() -> None:
        transport = pyqwest.HTTPTransport(http_version=pyqwest.HTTPVersion.HTTP2)
        client = TaskServiceClient(auth_server.url, protocol=protocol, http_client=pyqwest.Client(transport))
        with pytest.raises(ConnectError) as info:
            await client.enqueue(pb.EnqueueRequest(type="t"))
        assert info.value.code.value == "unauthenticated"
        ok = await client.enqueue(pb.EnqueueRequest(type="t"), headers={"authorization": "Bearer s3cret"})
        assert ok.task.type == "t"

    asyncio.run(main())


def test_session_auth_is_checked_at_stream_open(auth_server: ThreadServer) -> None:
    """A Session without a valid token fails unauthenticated before any frame is read (gRPC and Connect)."""

    async def main() -> None:
        client = await H2Client().connect("127.0.0.1", auth_server.port)
        sid = await client.open(SESSION)  # no frame sent at all
        st = await client.wait(sid)
        assert st.headers["grpc-status"] == "16"
        assert st.headers["grpc-message"] == "missing or invalid bearer token"
        sid = await client.open(SESSION, "application/connect+proto", extra={"authorization": "Bearer nope"})
        st = await client.wait(sid)
        assert st.headers[":status"] == "200" and st.messages[-1][0] == 0x02
        assert b'"unauthenticated"' in st.messages[-1][1]
        sid = await client.open(SESSION, extra={"authorization": "Bearer s3cret"})
        hello = pb.WorkerMessage(hello=pb.Hello(queues={"q": 1}, concurrency=1))
        await client.send_msg(sid, hello)
        msgs = await client.server_messages(sid, 1)
        assert msgs[0].WhichOneof("frame") == "welcome"
        await client.end(sid)
        assert (await client.wait(sid)).trailers["grpc-status"] == "0"
        await client.close()

    asyncio.run(main())


def test_health_endpoints_need_no_token(auth_server: ThreadServer) -> None:
    """/healthz and /readyz are never behind auth."""
    assert httpx.get(auth_server.url + "/healthz").status_code == 200
    assert httpx.get(auth_server.url + "/readyz").status_code == 200


def test_authenticator_unit() -> None:
    """No tokens disables auth; otherwise only an exact ``Bearer <token>`` passes."""
    assert Authenticator().check(None) is None
    auth = Authenticator(["a", "bb"])
    assert auth.check("Bearer a") is None and auth.check("Bearer bb") is None
    for bad in (None, "", "Bearer", "Bearer ", "Bearer b", "Bearer a ", "bearer a", "Token a"):
        err = auth.check(bad)
        assert err is not None and err.code.connect_name == "unauthenticated"


def test_credentials_are_judged_for_every_request_on_one_connection(auth_server: ThreadServer) -> None:
    """Requests sent whole (HEADERS + DATA in one write) on one HTTP/2 connection, good and bad tokens
    interleaved and repeated: the server reuses what it decided for a header block it saw last, but a
    changed block is judged afresh, so every request gets its own verdict."""
    body = pb.EnqueueRequest(type="t").SerializeToString()
    tokens = ["s3cret", "s3cret", "wrong", "wrong", "other", None, "s3cret", "s3cret"]

    async def main() -> list[str]:
        client = await H2Client().connect("127.0.0.1", auth_server.port)
        statuses = []
        for token in tokens:
            sid = client.conn.get_next_available_stream_id()
            headers = [(":method", "POST"), (":scheme", "http"), (":authority", "test"), (":path", ENQUEUE),
                       ("content-type", "application/proto")]  # fmt: skip
            if token is not None:
                headers.append(("authorization", f"Bearer {token}"))
            client.streams[sid] = StreamState()
            client.conn.send_headers(sid, headers)
            client.conn.send_data(sid, body, end_stream=True)
            await client._flush()  # one write: the whole request arrives in one read
            statuses.append((await client.wait(sid)).headers[":status"])
        await client.close()
        return statuses

    assert asyncio.run(main()) == ["200", "200", "401", "401", "200", "401", "200", "200"]
