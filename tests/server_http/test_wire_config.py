"""Sans-I/O pieces: content-type negotiation, framing with compression, timeouts, and the config builder."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import InvalidArgument, ProtocolError, ResourceExhausted, Unimplemented
from conveyor_server_min._http.wire import (
    JSON,
    PROTO,
    MessageDecoder,
    Wire,
    decompress,
    encode_message,
    negotiate,
    parse_timeout,
)
from conveyor_server_min.config import ConfigError, HttpLimits, build_config


@pytest.mark.parametrize(
    ("ctype", "wire", "codec"),
    [
        ("application/grpc", Wire.GRPC, "proto"),
        ("application/grpc+proto", Wire.GRPC, "proto"),
        ("Application/GRPC+json; charset=utf-8", Wire.GRPC, "json"),
        ("application/grpc-web+proto", Wire.GRPC_WEB, "proto"),
        ("application/proto", Wire.CONNECT_UNARY, "proto"),
        ("application/json;charset=utf-8", Wire.CONNECT_UNARY, "json"),
        ("application/connect+proto", Wire.CONNECT_STREAM, "proto"),
        ("application/connect+json", Wire.CONNECT_STREAM, "json"),
    ],
)
def test_negotiate_known_types(ctype: str, wire: Wire, codec: str) -> None:
    """Each supported content type maps to its wire format and codec."""
    neg = negotiate(ctype)
    assert neg is not None and neg.wire is wire and neg.codec.name == codec


@pytest.mark.parametrize("ctype", [None, "", "text/plain", "application/grpc+thrift", "application/connect"])
def test_negotiate_unknown_types(ctype: str | None) -> None:
    """Anything else is unsupported (the call layer answers 415)."""
    assert negotiate(ctype) is None


def test_decoder_splits_joins_and_inflates() -> None:
    """Split messages reassemble; gzip-flagged ones are inflated; ``pending`` counts leftover bytes."""
    a, b = b"first", b"second" * 100
    stream = encode_message(a) + encode_message(gzip.compress(b), 0x01)
    dec = MessageDecoder(1024, "gzip")
    out = []
    for i in range(0, len(stream), 7):
        out += dec.feed(stream[i : i + 7])
    assert out == [(0, a), (1, b)] and dec.pending == 0
    dec.feed(encode_message(b"xyz")[:-1])
    assert dec.pending == 7


def test_decoder_limits_and_undeclared_compression() -> None:
    """Oversize prefixes fail before buffering; a compressed flag with no declared encoding is refused."""
    with pytest.raises(ResourceExhausted):
        MessageDecoder(10).feed(b"\x00\x00\x00\x00\x0b")
    with pytest.raises(ProtocolError):
        MessageDecoder(100).feed(encode_message(b"x", 0x01))
    with pytest.raises(ResourceExhausted):
        decompress("gzip", gzip.compress(b"\x00" * 5000), 100)
    with pytest.raises(Unimplemented):
        decompress("br", b"", 100)
    with pytest.raises(InvalidArgument):
        decompress("gzip", b"not gzip", 100)


def test_codecs_round_trip_and_reject_garbage() -> None:
    """Proto and JSON codecs round-trip; malformed input is invalid_argument."""
    msg = pb.EnqueueRequest(type="t", payload=b"\x00\xff", max_retry=3)
    for codec in (PROTO, JSON):
        assert codec.decode(codec.encode(msg), pb.EnqueueRequest) == msg
    assert b'"maxRetry":3' in JSON.encode(msg)
    assert JSON.decode(b'{"max_retry": 2, "unknownField": 1}', pb.EnqueueRequest).max_retry == 2
    with pytest.raises(InvalidArgument):
        PROTO.decode(b"\xff\xff", pb.EnqueueRequest)
    with pytest.raises(InvalidArgument):
        JSON.decode(b"[1,2]", pb.EnqueueRequest)


def test_parse_timeout() -> None:
    """grpc-timeout units and connect-timeout-ms parse to seconds; malformed values are invalid_argument."""
    assert parse_timeout(Wire.GRPC, {"grpc-timeout": "250m"}) == pytest.approx(0.25)
    assert parse_timeout(Wire.GRPC, {"grpc-timeout": "2S"}) == 2.0
    assert parse_timeout(Wire.CONNECT_UNARY, {"connect-timeout-ms": "1500"}) == 1.5
    assert parse_timeout(Wire.GRPC, {}) is None
    with pytest.raises(InvalidArgument):
        parse_timeout(Wire.GRPC, {"grpc-timeout": "soon"})
    with pytest.raises(InvalidArgument):
        parse_timeout(Wire.CONNECT_STREAM, {"connect-timeout-ms": "-1"})


def test_build_config_precedence_and_defaults() -> None:
    """Defaults < environment < flags; durations parse; env listen ':port' binds all interfaces."""
    env = {
        "CONVEYOR_API__LISTEN": ":9000",
        "CONVEYOR_ENGINE__LEASE_TTL": "5s",
        "CONVEYOR_ENGINE__GROUP_MAX_SIZE": "7",
    }
    cfg = build_config({"dev": True, "lease_ttl": "250ms"}, env)
    assert (cfg.host, cfg.port) == ("0.0.0.0", 9000)
    assert cfg.engine.lease_ttl == 0.25 and cfg.engine.group_max_size == 7
    assert cfg.engine.reap_interval == 15.0 and cfg.scheme == "http" and cfg.tokens == ()
    plain = build_config({"token": ["a", "b"]}, {})
    assert (plain.host, plain.port, plain.tokens, plain.dev) == ("127.0.0.1", 8080, ("a", "b"), False)
    assert build_config({}, {"CONVEYOR_API__ALLOW_UNAUTHENTICATED": "true"}).tokens == ()


def test_build_config_http_limits() -> None:
    """Timeout and cap flags reach ServerConfig.http; the rest keep their documented defaults."""
    flags = {"dev": True, "idle_timeout": "1m", "header_timeout": "250ms", "body_timeout": "2s"}
    cfg = build_config({**flags, "max_streams": "16", "max_connections_per_client": "4"}, {})
    http = cfg.http
    assert (http.idle_timeout, http.header_timeout, http.body_timeout) == (60.0, 0.25, 2.0)
    assert (http.max_streams, http.max_connections_per_client) == (16, 4)
    assert build_config({"dev": True}, {}).http == HttpLimits()
    assert (HttpLimits().max_resets, HttpLimits().max_header_bytes) == (200, 64 * 1024)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ({"dev": True, "promote_interval": "0s"}, "--promote-interval must be greater than zero"),
        ({"dev": True, "default_max_retry": "-1"}, "--default-max-retry must not be negative"),
        ({"dev": True, "group_max_delay": "1 minute"}, "--group-max-delay"),
        ({}, "refusing to start"),
        ({"dev": True, "body_timeout": "0s"}, "--body-timeout must be greater than zero"),
        ({"dev": True, "max_streams": "0"}, "--max-streams must be greater than zero"),
    ],
)
def test_build_config_errors(flags: dict[str, object], needle: str) -> None:
    """Invalid values raise ConfigError with a one-line message naming the flag."""
    with pytest.raises(ConfigError) as info:
        build_config(flags, {})
    assert needle in str(info.value) and "\n" not in str(info.value)


@given(
    st.lists(st.binary(max_size=300), max_size=8),
    st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=20),
)
@settings(max_examples=200, deadline=None)
def test_decoder_is_split_invariant(payloads: list[bytes], cuts: list[int]) -> None:
    """However the byte stream is cut into feeds, the same messages come out in order."""
    stream = b"".join(encode_message(p) for p in payloads)
    dec = MessageDecoder(1024)
    out: list[bytes] = []
    pos, i = 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        out += [data for _, data in dec.feed(stream[pos : pos + step])]
        pos, i = pos + step, i + 1
    assert out == payloads and dec.pending == 0


@given(st.binary(max_size=200))
@settings(max_examples=200, deadline=None)
def test_codec_decode_never_raises_foreign_errors(data: bytes) -> None:
    """Arbitrary bytes either decode or raise InvalidArgument, for both codecs."""
    for codec in (PROTO, JSON):
        try:
            msg = codec.decode(data, pb.WorkerMessage)
        except InvalidArgument as exc:
            assert exc.code.connect_name == "invalid_argument"
        else:
            assert isinstance(msg, pb.WorkerMessage)
