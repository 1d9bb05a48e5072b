"""The async Client's own Connect unary calls answer exactly as connectrpc's client would.

Each case puts one answer (status, headers, body) in a real HTTP/2 peer and makes the same
call twice: through the default Client (``ConnectUnaryStub`` on our HTTP/2 transport) and
through connectrpc's generated client on the same transport (a Client given the transport).
Both must return the same task or raise the same error class with the same code, message and
details.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import pytest

from conveyor_sdk._client.connect_unary import ConnectUnaryStub
from conveyor_sdk._client.h2transport import MAX_INFLATED, H2Transport
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.client import Client, RetryConfig
from conveyor_sdk.errors import ConveyorError, DeadlineExceeded
from tests.sdk_client._h2peer import Knobs, UnaryPeer

ONCE = RetryConfig(attempts=1)
JSON = [("content-type", "application/json")]
PROTO = [("content-type", "application/proto")]


def _task_answer() -> bytes:
    resp = pb.GetTaskResponse()
    resp.task.id = "t-1"
    resp.task.type = "peer"
    resp.task.queue = "default"
    return resp.SerializeToString()


def _outcome(client: Client) -> Any:
    async def call() -> Any:
        try:
            info = await client.get_task("t-1")
        except ConveyorError as exc:
            return ("error", type(exc).__name__, exc.code, exc.message, dict(exc.details))
        return ("task", info.id, info.type, info.queue)

    return call()


def _both(reply: tuple[int, list[tuple[str, str]], bytes]) -> tuple[Any, Any, list[dict[str, str]]]:
    async def main() -> tuple[Any, Any, list[dict[str, str]]]:
        async with UnaryPeer(Knobs(reply=reply)) as peer:
            async with Client(peer.url, retry=ONCE, token="s3cret") as native:
                assert isinstance(native._tasks, ConnectUnaryStub)
                ours = await _outcome(native)
            async with Client(peer.url, retry=ONCE, token="s3cret", transport=H2Transport(peer.url)) as cr:
                assert not isinstance(cr._tasks, ConnectUnaryStub)
                theirs = await _outcome(cr)
            return ours, theirs, peer.seen.requests

    return asyncio.run(main())


CASES = {
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


@pytest.mark.parametrize("name", list(CASES))
def test_answers_read_as_connectrpc_reads_them(name: str) -> None:
    ours, theirs, requests = _both(CASES[name])
    assert ours == theirs
    assert len(requests) == 2


def test_a_gzip_answer_is_inflated_on_both_paths() -> None:
    """connectrpc asks for gzip and leaves inflating to the transport: ours does it on both paths."""
    ours, theirs, _ = _both((200, [*PROTO, ("content-encoding", "gzip")], gzip.compress(_task_answer())))
    assert ours == theirs == ("task", "t-1", "peer", "default")


def test_a_gzip_json_error_is_inflated() -> None:
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
    async def main() -> dict[str, str]:
        async with UnaryPeer(Knobs(reply=CASES["ok"])) as peer:
            async with Client(peer.url, retry=ONCE, headers={"User-Agent": "mine/1"}) as client:
                await client.get_task("t-1")
            return peer.seen.requests[0]

    seen = asyncio.run(main())
    assert seen["user-agent"] == "mine/1"


def test_the_deadline_is_sent_and_kept() -> None:
    """A silent server: the call fails with deadline_exceeded after rpc_timeout and resets its stream."""

    async def main() -> tuple[BaseException, UnaryPeer]:
        async with UnaryPeer(Knobs(answer=False)) as peer:
            async with Client(peer.url, retry=ONCE) as client:
                with pytest.raises(DeadlineExceeded) as err:
                    await client.get_task("t-1", rpc_timeout=0.2)
                await asyncio.wait_for(peer.reset_seen.wait(), 5)
            return err.value, peer

    err, peer = asyncio.run(main())
    assert "0.2s deadline" in str(err)
    assert peer.seen.requests[0]["connect-timeout-ms"] == "200"
    assert peer.seen.resets == [0x8]


@pytest.mark.parametrize(
    ("options", "native"),
    [
        ({}, True),
        ({"wire_format": "json"}, False),
        ({"protocol": "grpc"}, False),
        ({"http2": False}, False),
    ],
)
def test_only_connect_proto_over_our_transport_skips_connectrpc(
    options: dict[str, Any], native: bool
) -> None:
    async def main() -> bool:
        async with Client("http://127.0.0.1:1", **options) as client:
            return isinstance(client._tasks, ConnectUnaryStub)

    assert asyncio.run(main()) is native
