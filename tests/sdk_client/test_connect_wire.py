"""ConnectWire reads each answer by its own headers, also after remembering a plain header tuple."""

from __future__ import annotations

import gzip

import pytest

from conveyor_sdk._client.connect_unary import ConnectWire
from conveyor_sdk._client.unary import PROTO, Exchange
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import ConveyorError, Internal, Unknown

PLAIN = (("content-type", "application/proto"),)
GZIP = (("content-type", "application/proto"), ("content-encoding", "gzip"))


def _body(task_id: str) -> bytes:
    resp = pb.EnqueueResponse()
    resp.task.id = task_id
    return resp.SerializeToString()  # type: ignore[no-any-return]


def test_a_remembered_header_tuple_does_not_hide_the_next_answers_headers() -> None:
    """Plain, plain again (remembered), gzip, a wrong media type, an error status: each read as sent."""
    wire = ConnectWire(PROTO)
    assert wire.read(Exchange(200, PLAIN, _body("a")), pb.EnqueueResponse).task.id == "a"
    assert wire.read(Exchange(200, PLAIN, _body("b")), pb.EnqueueResponse).task.id == "b"
    zipped = gzip.compress(_body("c"))
    assert wire.read(Exchange(200, GZIP, zipped), pb.EnqueueResponse).task.id == "c"
    with pytest.raises(Unknown, match="invalid content-type: 'text/plain'"):
        wire.read(Exchange(200, (("content-type", "text/plain"),), _body("d")), pb.EnqueueResponse)
    with pytest.raises(Internal, match="invalid content-type: 'application/json'"):
        wire.read(Exchange(200, (("content-type", "application/json"),), b"{}"), pb.EnqueueResponse)
    with pytest.raises(ConveyorError):
        wire.read(Exchange(503, PLAIN, b""), pb.EnqueueResponse)
    assert wire.read(Exchange(200, PLAIN, _body("e")), pb.EnqueueResponse).task.id == "e"


def test_a_header_list_is_checked_every_time() -> None:
    """Only immutable tuples are remembered: a list (pyqwest's answers) is read afresh each call."""
    wire = ConnectWire(PROTO)
    headers = [("content-type", "application/proto")]
    assert wire.read(Exchange(200, headers, _body("a")), pb.EnqueueResponse).task.id == "a"
    headers[0] = ("content-type", "text/plain")
    with pytest.raises(Unknown):
        wire.read(Exchange(200, headers, _body("b")), pb.EnqueueResponse)
