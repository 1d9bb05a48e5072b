"""The transport against the real reference server: protocols, auth, 1 MiB+ frames over an in-memory
connection (the same kernel code as a socket); TLS and a server's SIGTERM over a subprocess on port 0."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from conveyor_sdk._client.h2transport import H2Transport
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._transport import SessionStream, TLSOptions, TransportOptions, open_session
from conveyor_sdk._transport._connect import Dialer, dial_tcp
from conveyor_sdk.errors import InvalidArgument, Unauthenticated, Unavailable
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_server_min.config import ServerConfig
from conveyor_server_min.server import Server
from conveyor_server_min.service_api import EngineConfig
from conveyor_server_min.testing import ServerProcess
from tests._util import eventually

from ._helpers import HELLO, make_certs

PROTOCOLS = ["grpc", "connect"]


@pytest.fixture
def start_server(server_factory: Callable[..., ServerProcess]) -> Callable[..., ServerProcess]:
    """Start reference servers (dev mode, 2 s lease by default) via the root ``server_factory``."""

    def start(args: Sequence[str] = ("--lease-ttl", "2s")) -> ServerProcess:
        return server_factory(args)

    return start


def _memory(**config: object) -> MemoryServer:
    """An in-process reference server (dev mode, 2 s lease unless ``config`` says otherwise)."""
    config.setdefault("dev", True)
    return MemoryServer(Server(ServerConfig(engine=EngineConfig(lease_ttl=2.0), **config)))  # type: ignore[arg-type]


async def _unary(server: MemoryServer, method: str, req: object, resp: object) -> None:
    fields = (("content-type", "application/proto"), ("connect-protocol-version", "1"))
    http = H2Transport(server.url, dialer=server.dial)
    try:
        body = req.SerializeToString()  # type: ignore[attr-defined]
        r = await http.exchange(f"/conveyor.v1.TaskService/{method}", fields, body, 10)
    finally:
        await http.aclose()
    assert r.status == 200, r.body
    resp.ParseFromString(r.body)  # type: ignore[attr-defined]


async def _welcomed(
    url: str, protocol: str, dialer: Dialer = dial_tcp, **kw: object
) -> tuple[SessionStream, pb.Welcome]:
    options = TransportOptions(protocol=protocol, **kw)  # type: ignore[arg-type]
    stream = await open_session(url, options, dialer=dialer)
    await stream.send(HELLO)
    first = await asyncio.wait_for(stream.recv(), 10)
    assert first is not None and first.WhichOneof("frame") == "welcome", first
    return stream, first.welcome


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_hello_welcome_and_clean_close(protocol: str) -> None:
    """Hello gets a Welcome with the session timings; a half-close ends the stream cleanly."""

    async def main() -> None:
        async with _memory() as server:
            stream, welcome = await _welcomed(server.url, protocol, server.dial)
            await _close_cleanly(stream, welcome)

    asyncio.run(main())


async def _close_cleanly(stream: SessionStream, welcome: pb.Welcome) -> None:
    async with stream:
        assert welcome.session_id
        assert welcome.lease_ttl.seconds == 2
        assert welcome.heartbeat_interval.ToTimedelta().total_seconds() > 0
        assert stream.response_headers is not None
        await stream.close_send()
        assert await asyncio.wait_for(stream.recv(), 10) is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bad_first_frame_is_invalid_argument(protocol: str) -> None:
    """A non-Hello first frame ends the stream with InvalidArgument from the server."""

    async def main() -> None:
        async with _memory() as server:
            options = TransportOptions(protocol=protocol)  # type: ignore[arg-type]
            stream = await open_session(server.url, options, dialer=server.dial)
            async with stream:
                await stream.send(pb.WorkerMessage(heartbeat=pb.Heartbeat()))
                with pytest.raises(InvalidArgument, match="Hello"):
                    await asyncio.wait_for(stream.recv(), 10)

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_auth(protocol: str) -> None:
    """With a token configured, a tokenless session is Unauthenticated and a good token gets a Welcome."""

    async def main() -> None:
        async with _memory(dev=False, tokens=("sekret",)) as server:
            options = TransportOptions(protocol=protocol)  # type: ignore[arg-type]
            stream = await open_session(server.url, options, dialer=server.dial)
            async with stream:
                await stream.send(HELLO)
                with pytest.raises(Unauthenticated):
                    await asyncio.wait_for(stream.recv(), 10)
            stream, _ = await _welcomed(server.url, protocol, server.dial, token="sekret")
            await stream.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_megabyte_dispatch_and_result(protocol: str) -> None:
    """A 1 MiB payload arrives in a Dispatch and a 1.5 MiB result is accepted (task completes)."""

    async def main() -> None:
        async with _memory() as server:
            stream, _ = await _welcomed(server.url, protocol, server.dial)
            async with stream:
                await _megabyte_round_trip(server, stream)

    asyncio.run(main())


async def _megabyte_round_trip(server: MemoryServer, stream: SessionStream) -> None:
    req = pb.EnqueueRequest(type="big", payload=b"x" * (1 << 20), content_type="application/octet-stream")
    resp = pb.EnqueueResponse()
    await _unary(server, "Enqueue", req, resp)
    msg = await asyncio.wait_for(stream.recv(), 10)
    assert msg is not None and msg.WhichOneof("frame") == "dispatch", msg
    task = msg.dispatch.task
    assert task.id == resp.task.id and task.payload == req.payload
    result = pb.Result(task_id=task.id, outcome=pb.TASK_OUTCOME_SUCCESS, result=b"y" * (3 << 19))
    await stream.send(pb.WorkerMessage(result=result))

    async def completed() -> bool:
        got = pb.GetTaskResponse()
        await _unary(server, "GetTask", pb.GetTaskRequest(id=task.id), got)
        return got.task.state == tpb.TASK_STATE_COMPLETED

    await eventually(completed, timeout=10, what="task completed")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_tls_reference_server(start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    """The reference server with --tls-cert/--tls-key: a session verified against our CA gets a Welcome."""
    certs = make_certs(tmp_path)
    server = start_server(["--dev", "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)])
    assert server.url.startswith("https://")

    async def main() -> None:
        stream, welcome = await _welcomed(server.url, "grpc", tls=TLSOptions(ca_file=str(certs.ca)))
        async with stream:
            assert welcome.session_id
        with pytest.raises(Unavailable, match="certificate verification failed"):
            await open_session(server.url, TransportOptions())

    asyncio.run(main())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_server_shutdown_ends_session(start_server: Callable[..., ServerProcess], protocol: str) -> None:
    """SIGTERM on the server ends an established session promptly: None or Unavailable, nothing else."""
    server = start_server()

    async def main() -> None:
        stream, _ = await _welcomed(server.url, protocol)
        async with stream:
            code = await asyncio.to_thread(server.stop)
            assert code == 0
            try:
                end = await asyncio.wait_for(stream.recv(), 10)
            except Unavailable:
                return
            assert end is None

    asyncio.run(main())
