"""TLS with ALPN: HTTP/2 (gRPC session + unary) and HTTP/1.1 on the same TLS port, self-signed cert."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pyqwest
from connectrpc.protocol import ProtocolType

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1.service_connect import TaskServiceClient

from .fakes import ENQUEUE, SESSION, FakeServices, ThreadServer
from .h2client import H2Client
from .tls_util import make_cert


def test_tls_serves_h2_via_alpn_and_http1(tmp_path: Path) -> None:
    """An https:// URL; ALPN h2 carries a gRPC session and Connect unary; HTTP/1.1 clients also work."""
    cert, key = make_cert(tmp_path)
    with ThreadServer(FakeServices(), tls_cert=str(cert), tls_key=str(key)) as server:
        assert server.url.startswith("https://127.0.0.1:")
        ctx = ssl.create_default_context(cafile=str(cert))
        ctx.set_alpn_protocols(["h2"])

        async def main() -> None:
            client = await H2Client().connect("127.0.0.1", server.port, tls=ctx)
            sid = await client.open(SESSION)
            await client.send_msg(sid, pb.WorkerMessage(hello=pb.Hello(queues={"q": 1}, concurrency=1)))
            msgs = await client.server_messages(sid, 1)
            assert msgs[0].welcome.session_id == "s-1"
            await client.end(sid)
            assert (await client.wait(sid)).trailers["grpc-status"] == "0"
            await client.close()
            transport = pyqwest.HTTPTransport(tls_ca_cert=cert.read_bytes())
            unary = TaskServiceClient(
                server.url, protocol=ProtocolType.GRPC, http_client=pyqwest.Client(transport)
            )
            assert (await unary.enqueue(pb.EnqueueRequest(type="tls"))).task.type == "tls"

        asyncio.run(main())
        with httpx.Client(verify=ssl.create_default_context(cafile=str(cert))) as h1:
            resp = h1.post(server.url + ENQUEUE, json={"type": "over-tls"})
            assert resp.status_code == 200 and resp.http_version == "HTTP/1.1"
            assert resp.json()["task"]["type"] == "over-tls"
