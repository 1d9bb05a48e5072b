"""gRPC/Connect length-prefixed framing: incremental decode, limits, trailers and end-of-stream errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conveyor_sdk._protocol.framing import (
    FLAG_END_STREAM,
    FrameDecoder,
    connect_end_stream_payload,
    encode_frame,
    error_from_connect_end_stream,
    error_from_grpc_trailers,
    grpc_message_decode,
    grpc_message_encode,
)
from conveyor_sdk.errors import (
    Code,
    InvalidArgument,
    NotFound,
    ProtocolError,
    ResourceExhausted,
    Unauthenticated,
)


def test_roundtrip_split_at_every_byte() -> None:
    """Frames survive being fed one byte at a time."""
    data = encode_frame(b"hello") + encode_frame(b"") + encode_frame(b"x" * 300, flags=FLAG_END_STREAM)
    decoder = FrameDecoder()
    frames = [f for i in range(len(data)) for f in decoder.feed(data[i : i + 1])]
    assert [(f.flags, f.data) for f in frames] == [(0, b"hello"), (0, b""), (FLAG_END_STREAM, b"x" * 300)]
    assert frames[2].end_stream and not frames[0].end_stream
    assert decoder.pending == 0


@given(st.lists(st.binary(max_size=64), max_size=8), st.integers(min_value=1, max_value=7))
def test_any_chunking_gives_the_same_frames(payloads: list[bytes], step: int) -> None:
    """Whatever the chunk size, the decoder returns the encoded payloads in order."""
    data = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder()
    got = [f.data for i in range(0, len(data), step) for f in decoder.feed(data[i : i + step])]
    assert got == payloads


def test_truncated_frame_stays_pending() -> None:
    """An incomplete frame is buffered, not returned, and its size is visible."""
    decoder = FrameDecoder()
    assert decoder.feed(encode_frame(b"abcdef")[:-2]) == []
    assert decoder.pending == 9


def test_oversize_frame_is_refused_before_buffering() -> None:
    """A header announcing more than max_message raises ResourceExhausted at once."""
    decoder = FrameDecoder(max_message=10)
    with pytest.raises(ResourceExhausted, match="exceeds the limit"):
        decoder.feed(encode_frame(b"x" * 11)[:5])


def test_compressed_frame_is_a_protocol_error() -> None:
    """Compression was never negotiated, so a compressed flag is the peer's protocol error."""
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(encode_frame(b"x", flags=1))


def test_grpc_message_percent_encoding_roundtrip() -> None:
    """grpc-message values are percent-encoded for non-ASCII and '%' and decode back."""
    text = 'bad queue "é" 100%\n'
    encoded = grpc_message_encode(text)
    assert encoded.isascii() and "%25" in encoded and "%C3%A9" in encoded
    assert grpc_message_decode(encoded) == text


def test_grpc_trailers_map_to_errors() -> None:
    """grpc-status 0 is success; other numbers become the matching ConveyorError subclass."""
    assert error_from_grpc_trailers({"grpc-status": "0"}) is None
    err = error_from_grpc_trailers({"grpc-status": "16", "grpc-message": "missing%20token"})
    assert isinstance(err, Unauthenticated) and err.message == "missing token"
    missing = error_from_grpc_trailers({})
    assert missing is not None and missing.code is Code.INTERNAL
    assert error_from_grpc_trailers({"grpc-status": "x"}) is not None


def test_connect_end_stream_roundtrip() -> None:
    """The Connect end-of-stream JSON carries the error code and message, or nothing on success."""
    assert error_from_connect_end_stream(connect_end_stream_payload(None)) is None
    err = error_from_connect_end_stream(connect_end_stream_payload(NotFound("no such task")))
    assert isinstance(err, NotFound) and err.message == "no such task"
    bad = error_from_connect_end_stream(b"not json")
    assert bad is not None and bad.code is Code.INTERNAL
    assert isinstance(
        error_from_connect_end_stream(b'{"error":{"code":"invalid_argument"}}'), InvalidArgument
    )
