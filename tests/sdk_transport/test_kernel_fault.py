"""The worker session: a failure in the kernel's fast DATA read is our Internal error, not the server's."""

from __future__ import annotations

import struct

import h2.config
import h2.connection
import pytest

from conveyor_sdk._h2kernel import client_fast, probe
from conveyor_sdk._h2kernel.peer import peer_connection
from conveyor_sdk._protocol.framing import encode_frame
from conveyor_sdk._transport.core import SessionCore
from conveyor_sdk.errors import Internal, Unavailable
from tests._h2paths import FAST_ONLY

pytestmark = FAST_ONLY

HEADERS = [(":method", "POST"), (":scheme", "http"), (":path", "/x/y"), (":authority", "h:1")]


class _Renamed(struct.Struct):
    def unpack_from(self, *args: object, **kwargs: object) -> tuple[int, ...]:
        raise AttributeError("'FrameBuffer' object has no attribute '_headers_buffer'")


def _answering() -> tuple[SessionCore, h2.connection.H2Connection]:
    core = SessionCore("grpc")
    core.start(HEADERS)
    srv = peer_connection()
    srv.initiate_connection()
    srv.receive_data(core.data_to_send())
    srv.send_headers(1, [(":status", "200"), ("content-type", "application/grpc")])
    core.receive_data(srv.data_to_send())
    srv.receive_data(core.data_to_send())
    return core, srv


def test_a_fast_read_failure_fails_the_session_as_our_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "fast", True)
    monkeypatch.setattr(probe, "_warned", False)
    monkeypatch.setattr(client_fast, "_FRAME_HEAD", _Renamed(">BHBBI"))
    core, srv = _answering()
    srv.send_data(1, encode_frame(b"dispatch"))
    core.receive_data(srv.data_to_send())
    assert core.finished and core.connection_closed
    assert isinstance(core.error, Internal) and not isinstance(core.error, Unavailable)
    assert "HTTP/2 layer (fast path; h2 4." in core.error.message
    assert not probe.fast  # the next session takes the public path
    monkeypatch.setattr(client_fast, "_FRAME_HEAD", struct.Struct(">BHBBI"))
    again, srv = _answering()  # ... and works there
    srv.send_data(1, encode_frame(b"dispatch"))
    again.receive_data(srv.data_to_send())
    assert again.take_message() == b"dispatch" and again.fast_frames == 0


def test_a_foreign_exception_from_h2_is_ours_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """h2 turns every bad input into ProtocolError; anything else it raises is a bug on this side."""
    core, srv = _answering()

    def broken(data: bytes) -> object:
        raise KeyError("a bug")

    monkeypatch.setattr(core._conn, "receive_data", broken)
    srv.ping(b"12345678")
    core.receive_data(srv.data_to_send())
    assert isinstance(core.error, Internal) and "not the server's" in core.error.message
