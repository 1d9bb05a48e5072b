"""The async Client's one task-call path answers exactly as connectrpc's client would, in every mode.

Each case puts one answer (status, headers, body, trailers) in a real HTTP/2 peer and makes the
same call twice: through the Client (its ``UnaryStub`` on our HTTP/2 transport) and through
connectrpc's generated client on the same kind of transport, with the same protocol and codec.
Both must return the same task or raise the same error class with the same code, message and
details. Connect and gRPC, binary proto and JSON.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from typing import Any

import pyqwest
import pytest
from google.protobuf import json_format

from conveyor_sdk._client.h2transport import MAX_INFLATED, H2Transport
from conveyor_sdk._client.pyqwest_exchange import PyqwestExchange
from conveyor_sdk._client.unary import UnaryStub
from conveyor_sdk._gen.conveyor.v1 import service_connect as sc
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.client import Client, RetryConfig
from conveyor_sdk.errors import ConveyorError, DeadlineExceeded
from tests.sdk_client._h2peer import Knobs, UnaryPeer

ONCE = RetryConfig(attempts=1)
JSON = [("content-type", "application/json")]
PROTO = [("content-type", "application/proto")]
Reply = tuple[int, list[tuple[str, str]], bytes]


def _task() -> pb.GetTaskResponse:
    resp = pb.GetTaskResponse()
    resp.task.id = "t-1"
    resp.task.type = "peer"
    resp.task.queue = "default"
    return resp


def _task_answer() -> bytes:
    return _task().SerializeToString()


def _task_json() -> bytes:
    return json_format.MessageToJson(_task()).encode()


def _outcome(client: Client) -> Any:
    async def call() -> Any:
        try:
            info = await client.get_task("t-1")
        except ConveyorError as exc:
            return ("error", type(exc).__name__, exc.code, exc.message, dict(exc.details))
        return ("task", info.id, info.type, info.queue)

    return call()


def _both(
    reply: Reply, trailers: list[tuple[str, str]] | None = None, **options: Any
) -> tuple[Any, Any, list[dict[str, str]]]:
    async def main() -> tuple[Any, Any, list[dict[str, str]]]:
        async with UnaryPeer(Knobs(reply=reply, trailers=trailers)) as peer:
            async with Client(peer.url, retry=ONCE, token="s3cret", **options) as native:
                assert isinstance(native._tasks, UnaryStub)
                ours = await _outcome(native)
            reference = H2Transport(peer.url)
            async with Client(peer.url, retry=ONCE, token="s3cret", **options) as cr:
                kwargs = cr._config.connect_kwargs()  # connectrpc's client, same protocol and codec
                http = pyqwest.Client(reference)
                cr._tasks = sc.TaskServiceClient(peer.url, http_client=http, **kwargs)
                theirs = await _outcome(cr)
            await reference.aclose()
            return ours, theirs, peer.seen.requests

    return asyncio.run(main())


CASES: dict[str, Reply] = {
    "ok": (200, PROTO, _task_answer()),
    "ok, media type with parameters": (200, [("content-type", "Application/Proto; x=y")], _task_answer()),
    "json error": (400, JSON, json.dumps({"code": "invalid_argument", "message": "bad id"}).encode()),
    "json error, not found": (404, JSON, json.dumps({"code": "not_found", "message": "no task"}).encode()),
    "json error with details": (
        409,
        JSON,
        json.dumps(
            {"code": "already_exists", "message": "dup", "details": [{"type": "x.Y", "value": "AA"}]}
        ).encode(),
    ),
    "json error, unknown code": (500, JSON, json.dumps({"code": "bogus", "message": "?"}).encode()),
    "json error, code unknown": (500, JSON, json.dumps({"code": "unknown", "message": "?"}).encode()),
    "json error, code not a string": (500, JSON, json.dumps({"code": 13, "message": "?"}).encode()),
    "json error, no code": (429, JSON, json.dumps({"message": "slow down"}).encode()),
    "json error, not an object": (503, JSON, b"[1, 2]"),
    "json error, not json": (502, JSON, b"<html>bad gateway</html>"),
    "error without a body": (503, [], b""),
    "error, text body": (401, [("content-type", "text/plain")], b"who are you"),
    "error, odd status": (499, [], b""),
    "error, unnamed status": (599, [], b""),
    "ok, not application/": (200, [("content-type", "text/plain")], b"hello"),
    "ok, another codec": (200, JSON, b"{}"),
    "ok, no content-type": (200, [], _task_answer()),
    "ok, garbage body": (200, PROTO, b"\xff\xff\xff\xff"),
    "ok, unknown encoding": (200, [*PROTO, ("content-encoding", "br")], b"xx"),
}

JSON_CASES: dict[str, Reply] = {
    "ok": (200, JSON, _task_json()),
    "ok, unknown field ignored": (200, JSON, b'{"task": {"id": "t-1", "type": "peer"}, "extra": 1}'),
    "ok, another codec": (200, PROTO, _task_answer()),
    "ok, garbage body": (200, JSON, b"{not json"),
    "ok, wrong field type": (200, JSON, b'{"task": 5}'),
    "json error": (404, JSON, json.dumps({"code": "not_found", "message": "no task"}).encode()),
    "error without a body": (503, [], b""),
}


@pytest.mark.parametrize("name", list(CASES))
def test_connect_proto_answers_read_as_connectrpc_reads_them(name: str) -> None:
    """Every kind of Connect answer to a binary-proto call: the same task or the same error."""
    ours, theirs, requests = _both(CASES[name])
    assert ours == theirs
    assert len(requests) == 2


@pytest.mark.parametrize("name", list(JSON_CASES))
def test_connect_json_answers_read_as_connectrpc_reads_them(name: str) -> None:
    """The same for ``wire_format="json"`` (JSON bodies, ``application/json``)."""
    ours, theirs, requests = _both(JSON_CASES[name], wire_format="json")
    assert ours == theirs
    assert requests[0]["content-type"] == requests[1]["content-type"] == "application/json"


def _env(message: bytes, flags: int = 0) -> bytes:
    return bytes([flags]) + len(message).to_bytes(4, "big") + message


def _status_bin(code: int, message: str) -> str:
    raw = bytes([0x08, code, 0x12, len(message)]) + message.encode()
    return base64.b64encode(raw).decode().rstrip("=")


GRPC = [("content-type", "application/grpc+proto")]
OK = [("grpc-status", "0")]
GrpcCase = tuple[Reply, list[tuple[str, str]] | None]
GRPC_CASES: dict[str, GrpcCase] = {
    "ok": ((200, GRPC, _env(_task_answer())), OK),
    "ok, bare application/grpc": ((200, [("content-type", "application/grpc")], _env(_task_answer())), OK),
    "ok, gzip message": (
        (200, [*GRPC, ("grpc-encoding", "gzip")], _env(gzip.compress(_task_answer(), mtime=0), 1)),
        OK,
    ),
    "trailers-only error": ((200, [*GRPC, ("grpc-status", "5"), ("grpc-message", "no%20task")], b""), None),
    "error in trailers": ((200, GRPC, b""), [("grpc-status", "9"), ("grpc-message", "not%20now")]),
    "error after a message": ((200, GRPC, _env(_task_answer())), [("grpc-status", "14")]),
    "unknown status number": ((200, GRPC, b""), [("grpc-status", "99"), ("grpc-message", "?")]),
    "status details": (
        (200, GRPC, b""),
        [("grpc-status", "2"), ("grpc-status-details-bin", _status_bin(6, "dup"))],
    ),
    "no status after a message": ((200, GRPC, _env(_task_answer())), [("x-other", "1")]),
    "no status at all": ((200, GRPC, b""), None),
    "zero messages": ((200, GRPC, b""), OK),
    "two messages": ((200, GRPC, _env(_task_answer()) * 2), OK),
    "compressed without an encoding": ((200, GRPC, _env(_task_answer(), 1)), OK),
    "unknown encoding": ((200, [*GRPC, ("grpc-encoding", "br")], _env(_task_answer())), OK),
    "invalid flags": ((200, GRPC, _env(_task_answer(), 2)), OK),
    "truncated message": ((200, GRPC, _env(_task_answer())[:-2]), OK),
    "truncated prefix": ((200, GRPC, b"\0\0\0"), OK),
    "garbage message": ((200, GRPC, _env(b"\xff\xff\xff\xff")), OK),
    "not grpc": ((200, [("content-type", "text/plain")], b"hello"), OK),
    "another codec": ((200, [("content-type", "application/grpc+json")], _env(b"{}")), OK),
    "http error without a body": ((503, [], b""), None),
    "http error, json body": (
        (404, JSON, json.dumps({"code": "not_found", "message": "gone"}).encode()),
        None,
    ),
}


@pytest.mark.parametrize("name", list(GRPC_CASES))
def test_grpc_proto_answers_read_as_connectrpc_reads_them(name: str) -> None:
    """Every kind of gRPC answer (trailers, trailers-only, envelopes, compression): the same outcome."""
    reply, trailers = GRPC_CASES[name]
    ours, theirs, requests = _both(reply, trailers, protocol="grpc")
    assert ours == theirs
    assert len(requests) == 2


def test_grpc_json_reads_json_messages() -> None:
    """``protocol="grpc", wire_format="json"``: ``application/grpc+json``, JSON messages, as connectrpc."""
    reply = (200, [("content-type", "application/grpc+json")], _env(_task_json()))
    ours, theirs, requests = _both(reply, OK, protocol="grpc", wire_format="json")
    assert ours == theirs == ("task", "t-1", "peer", "default")
    assert requests[0]["content-type"] == requests[1]["content-type"] == "application/grpc+json"
    wrong = (200, GRPC, _env(_task_answer()))
    ours, theirs, _ = _both(wrong, OK, protocol="grpc", wire_format="json")
    assert ours == theirs
    assert ours[:3] == ("error", "Internal", ours[2])


def test_grpc_requests_carry_the_same_protocol_headers() -> None:
    """Path, method, media type, te, deadline and token match connectrpc's gRPC request."""
    _, _, requests = _both(*GRPC_CASES["ok"], protocol="grpc")
    ours, theirs = requests
    for name in (":method", ":path", "content-type", "te", "grpc-timeout", "authorization"):
        assert ours[name] == theirs[name], name
    assert ours["grpc-timeout"] == "30000m"
    assert ours["user-agent"].startswith("conveyor-python/")


def test_a_gzip_answer_is_inflated_on_both_paths() -> None:
    """connectrpc asks for gzip and leaves inflating to the transport: ours does it on both paths."""
    ours, theirs, _ = _both((200, [*PROTO, ("content-encoding", "gzip")], gzip.compress(_task_answer())))
    assert ours == theirs == ("task", "t-1", "peer", "default")


def test_a_gzip_json_error_is_inflated() -> None:
    """A gzip-compressed Connect JSON error body is read as the error it names."""
    body = gzip.compress(json.dumps({"code": "not_found", "message": "gone"}).encode())
    ours, theirs, _ = _both((404, [*JSON, ("content-encoding", "gzip")], body))
    assert ours == theirs
    assert ours[1:2] == ("NotFound",)


@pytest.mark.parametrize(
    ("body", "error", "text"),
    [
        (gzip.compress(b"\0" * (MAX_INFLATED + 1)), "ResourceExhausted", "inflates beyond"),
        (b"not gzip at all", "Internal", "malformed gzip"),
        (gzip.compress(_task_answer())[:-8], "Internal", "truncated"),
    ],
    ids=["inflates-too-far", "not-gzip", "truncated"],  # a gzip body holds the time: ids must not
)
def test_a_bad_gzip_answer_is_a_clear_error_on_both_paths(body: bytes, error: str, text: str) -> None:
    """Bombs, garbage and truncated gzip bodies fail with a clear typed error on both paths."""
    ours, theirs, _ = _both((200, [*PROTO, ("content-encoding", "gzip")], body))
    assert ours[:2] == theirs[:2] == ("error", error)
    assert text in ours[3] and text in theirs[3]


def test_requests_carry_the_same_protocol_headers() -> None:
    """Path, method, media type, protocol version, deadline and token match connectrpc's request."""
    _, _, requests = _both(CASES["ok"])
    ours, theirs = requests
    same = (
        ":method",
        ":path",
        "content-type",
        "connect-protocol-version",
        "connect-timeout-ms",
        "authorization",
    )
    for name in same:
        assert ours[name] == theirs[name], name
    assert ours[":path"] == "/conveyor.v1.TaskService/GetTask"
    assert ours["authorization"] == "Bearer s3cret"
    assert ours["user-agent"].startswith("conveyor-python/")


def test_a_user_agent_header_replaces_ours() -> None:
    """A ``user-agent`` in ``headers=`` is sent instead of ours."""

    async def main() -> dict[str, str]:
        async with UnaryPeer(Knobs(reply=CASES["ok"])) as peer:
            async with Client(peer.url, retry=ONCE, headers={"User-Agent": "mine/1"}) as client:
                await client.get_task("t-1")
            return peer.seen.requests[0]

    seen = asyncio.run(main())
    assert seen["user-agent"] == "mine/1"


@pytest.mark.parametrize(
    ("protocol", "header", "value"),
    [("connect", "connect-timeout-ms", "200"), ("grpc", "grpc-timeout", "200m")],
)
def test_the_deadline_is_sent_and_kept(protocol: str, header: str, value: str) -> None:
    """A silent server: the call fails with deadline_exceeded after rpc_timeout and resets its stream."""

    async def main() -> tuple[BaseException, UnaryPeer]:
        async with UnaryPeer(Knobs(answer=False)) as peer:
            async with Client(peer.url, retry=ONCE, protocol=protocol) as client:  # type: ignore[arg-type]
                with pytest.raises(DeadlineExceeded) as err:
                    await client.get_task("t-1", rpc_timeout=0.2)
                await asyncio.wait_for(peer.reset_seen.wait(), 5)
            return err.value, peer

    err, peer = asyncio.run(main())
    assert "0.2s deadline" in str(err)
    assert peer.seen.requests[0][header] == value
    assert peer.seen.resets == [0x8]


@pytest.mark.parametrize(
    ("options", "exchanger"),
    [
        ({}, H2Transport),
        ({"wire_format": "json"}, H2Transport),
        ({"protocol": "grpc"}, H2Transport),
        ({"protocol": "grpc", "wire_format": "json"}, H2Transport),
        ({"http2": False}, PyqwestExchange),
        ({"transport": pyqwest.HTTPTransport()}, PyqwestExchange),
    ],
)
def test_every_mode_takes_the_one_stub(options: dict[str, Any], exchanger: type) -> None:
    """Every protocol, format and transport runs task calls through UnaryStub; only the byte mover differs."""

    async def main() -> Any:
        async with Client("http://127.0.0.1:1", **options) as client:
            return client._tasks

    stub = asyncio.run(main())
    assert isinstance(stub, UnaryStub)
    assert isinstance(stub.exchanger, exchanger)
