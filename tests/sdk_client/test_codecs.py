"""Payload codecs: Go-compatible JSON bytes, octet-stream, protobuf, registry and typed decoding."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, TypedDict

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.codecs import (
    JSON,
    OCTET_STREAM,
    PROTOBUF,
    CodecError,
    CodecRegistry,
    JSONCodec,
    PayloadDecodeError,
    UnknownContentType,
    normalize_content_type,
)
from conveyor_sdk.errors import InvalidArgument
from conveyor_sdk.types import TaskInfo, TaskState


class Welcome(msgspec.Struct):
    user_id: int
    name: str = ""


@dataclasses.dataclass
class Point:
    y: int
    x: int


class Movie(TypedDict):
    title: str
    year: int


# Bytes produced by Go's encoding/json (json.Marshal) for the same values.
GO_VECTORS: list[tuple[Any, bytes]] = [
    ({"b": 1, "a": [1, 2], "c": None}, b'{"a":[1,2],"b":1,"c":null}'),  # map keys sorted
    ({"html": "<a href='x'>&</a>"}, b'{"html":"\\u003ca href=\'x\'\\u003e\\u0026\\u003c/a\\u003e"}'),
    ("line\u2028sep\u2029", b'"line\\u2028sep\\u2029"'),
    ("héllo ✓", '"héllo ✓"'.encode()),  # non-ASCII stays raw UTF-8
    ('tab\tnl\nquote"back\\', b'"tab\\tnl\\nquote\\"back\\\\"'),
    (True, b"true"),
    (-12345678901234, b"-12345678901234"),
    (0.5, b"0.5"),
    (b"hi", b'"aGk="'),  # []byte is base64 (std, padded)
    ([], b"[]"),
    ({}, b"{}"),
]


@pytest.mark.parametrize(("value", "go_bytes"), GO_VECTORS)
def test_json_matches_go_encoding(value: Any, go_bytes: bytes) -> None:
    """Ordinary values encode to the same bytes as Go's encoding/json."""
    assert JSONCodec().encode(value) == go_bytes


def test_struct_fields_keep_declaration_order_like_go_structs() -> None:
    """Struct/dataclass fields are not sorted (Go keeps struct field order too)."""
    assert JSONCodec().encode(Point(y=1, x=2)) == b'{"y":1,"x":2}'
    assert JSONCodec().encode(Welcome(user_id=7)) == b'{"user_id":7,"name":""}'


def test_html_escape_can_be_turned_off() -> None:
    """html_escape=False keeps <, >, & raw (valid JSON, not Go's default bytes)."""
    assert JSONCodec(html_escape=False).encode("<&>") == b'"<&>"'


# Produced by Go's json.Marshal (float64, time.Time, map[int]any) on the same values; see docs/client.md.
GO_FLOATS: list[tuple[float, bytes]] = [
    (1.0, b"1"), (-0.0, b"-0"), (0.0, b"0"), (1e-6, b"0.000001"), (1.5e-6, b"0.0000015"),
    (1e-7, b"1e-7"), (9.999999e-7, b"9.999999e-7"), (-3e-10, b"-3e-10"), (1e-5, b"0.00001"),
    (1.5e-5, b"0.000015"), (0.1, b"0.1"), (12345678.9, b"12345678.9"), (123456789.0, b"123456789"),
    (1e16, b"10000000000000000"), (1e20, b"100000000000000000000"), (1e21, b"1e+21"),
    (1.2345e22, b"1.2345e+22"), (1.1e40, b"1.1e+40"), (4e99, b"4e+99"),
    (5e-324, b"5e-324"), (1.7976931348623157e308, b"1.7976931348623157e+308"),
    (9.5e-6, b"0.0000095"), (1e-60, b"1e-60"), (-2.5e-65, b"-2.5e-65"), (3e30, b"3e+30"), (1e100, b"1e+100"),
]  # fmt: skip
GO_TIMES: list[tuple[datetime, bytes]] = [
    (datetime(2024, 1, 2, 3, 4, 5, 100000, tzinfo=UTC), b'"2024-01-02T03:04:05.1Z"'),
    (datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=1))), b'"2024-01-02T03:04:05+01:00"'),
    (
        datetime(2024, 1, 2, 3, 4, 5, 120, tzinfo=timezone(-timedelta(hours=7, minutes=30))),
        b'"2024-01-02T03:04:05.00012-07:30"',
    ),
    (datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC), b'"2024-01-02T03:04:05.123456Z"'),
]


@pytest.mark.parametrize(("value", "go_bytes"), GO_FLOATS, ids=[repr(v) for v, _ in GO_FLOATS])
def test_floats_match_go(value: float, go_bytes: bytes) -> None:
    """Go's 'f'/'e' switch (|x| < 1e-6 or >= 1e21), shortest digits, e-7 / e+21 exponents."""
    assert JSONCodec().encode(value) == go_bytes
    assert JSONCodec().encode([value, {"k": value}]) == b"[" + go_bytes + b',{"k":' + go_bytes + b"}]"


@pytest.mark.parametrize(("value", "go_bytes"), GO_TIMES, ids=[str(v) for v, _ in GO_TIMES])
def test_datetimes_match_go(value: datetime, go_bytes: bytes) -> None:
    """RFC 3339 with the fraction's trailing zeros dropped, as Go's time.Time writes it."""
    assert JSONCodec().encode(value) == go_bytes


def test_int_keys_become_strings_sorted_as_go_sorts_them() -> None:
    """Int map keys are written as strings sorted as strings ("-1" < "1" < "10" < "2")."""
    value = {1: "a", -1: "d", 10: "x", 2: "y", 0: {3: 1.0, -20: 1e-7}}
    assert JSONCodec().encode(value) == b'{"-1":"d","0":{"-20":1e-7,"3":1},"1":"a","10":"x","2":"y"}'
    with pytest.raises(CodecError, match="mixes key types"):
        JSONCodec().encode({1: "a", "b": 2})


def test_struct_order_survives_the_go_rewrite() -> None:
    """When floats force the exact path, struct fields keep declaration order and dicts stay sorted."""

    class Reading(msgspec.Struct):
        z: float
        a: dict[str, float]

    assert JSONCodec().encode(Reading(1.0, {"y": 2.0, "b": 1e-7})) == b'{"z":1,"a":{"b":1e-7,"y":2}}'


def test_string_look_alikes_are_left_alone() -> None:
    """Text that looks like a float or a time inside a string is never rewritten."""
    value = {"s": "x:1.0]", "t": "2024-01-02T03:04:05.100000Z", "n": 2.5}
    assert JSONCodec().encode(value) == b'{"n":2.5,"s":"x:1.0]","t":"2024-01-02T03:04:05.100000Z"}'
    tricky = {"q": 'a"1.0,\\"2e-7', "n": [1.0, -2, 1e-7, 12345678901234567890], "k-1.0": 0.5}
    expected = b'{"k-1.0":0.5,"n":[1,-2,1e-7,12345678901234567890],"q":"a\\"1.0,\\\\\\"2e-7"}'
    assert JSONCodec().encode(tricky) == expected


def _go_reference(f: float) -> str:
    """Independent model of Go's rule through Decimal (exact decimal of the shortest repr)."""
    d = Decimal(repr(f)).normalize()
    if f == 0:
        return "-0" if str(f).startswith("-") else "0"
    if abs(f) < 1e-6 or abs(f) >= 1e21:
        return f"{d:e}".replace("E", "e")
    return f"{d:f}"


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_follow_go_rule_and_round_trip(value: float) -> None:
    """Any finite float encodes per Go's rule and decodes back to the same float."""
    data = JSONCodec().encode(value)
    assert data.decode() == _go_reference(value)
    assert JSONCodec().decode(data, float) == value


@pytest.mark.parametrize(
    ("type_", "data", "expected"),
    [
        (Welcome, b'{"user_id":42}', Welcome(user_id=42)),
        (Point, b'{"x":1,"y":2}', Point(y=2, x=1)),
        (Movie, b'{"title":"Heat","year":1995}', {"title": "Heat", "year": 1995}),
        (list[int], b"[1,2,3]", [1, 2, 3]),
        (Any, b'{"a":[1,"x"]}', {"a": [1, "x"]}),
        (Any, b"", None),
    ],
)
def test_json_typed_decoding(type_: Any, data: bytes, expected: Any) -> None:
    """Structs, dataclasses, TypedDicts and plain values decode from JSON."""
    assert JSONCodec().decode(data, type_) == expected


def test_json_decode_errors_are_typed() -> None:
    """Shape mismatches and broken JSON raise PayloadDecodeError naming the type."""
    with pytest.raises(PayloadDecodeError, match="Welcome") as info:
        JSONCodec().decode(b'{"user_id":"x"}', Welcome)
    assert isinstance(info.value, InvalidArgument) and isinstance(info.value, ValueError)
    with pytest.raises(PayloadDecodeError):
        JSONCodec().decode(b"{not json", Any)


def test_json_encode_error_is_typed() -> None:
    """A value msgspec cannot encode (or a lone surrogate) raises CodecError, not a foreign exception."""
    with pytest.raises(CodecError, match="cannot encode object"):
        JSONCodec().encode(object())
    with pytest.raises(CodecError, match="surrogates"):
        JSONCodec().encode({"s": "\ud800"})


def test_octet_stream_and_protobuf_round_trip() -> None:
    """Bytes pass verbatim; protobuf messages use their wire encoding."""
    reg = CodecRegistry.default()
    assert reg.encode(b"\x00\xff") == (b"\x00\xff", OCTET_STREAM)
    assert reg.decode(b"\x00\xff", OCTET_STREAM) == b"\x00\xff"
    dep = tpb.TaskDependency(task_id="a", on_failure=tpb.DEPENDENCY_FAILURE_POLICY_CONTINUE)
    data, ct = reg.encode(dep)
    assert ct == PROTOBUF and data == dep.SerializeToString()
    assert reg.decode(data, PROTOBUF, tpb.TaskDependency) == dep
    with pytest.raises(PayloadDecodeError, match="needs a protobuf message class"):
        reg.decode(data, PROTOBUF)
    with pytest.raises(PayloadDecodeError, match=r"conveyor\.v1\.TaskDependency"):
        reg.decode(b"\xff\xff\xff", PROTOBUF, tpb.TaskDependency)
    with pytest.raises(CodecError, match="must be bytes"):
        reg.get(OCTET_STREAM).encode("text")


def test_registry_selection_and_unknown_content_type() -> None:
    """Values pick their default codec; unknown content types raise, never guess."""
    reg = CodecRegistry.default()
    assert reg.encode({"a": 1}) == (b'{"a":1}', JSON)
    assert reg.encode(None) == (b"", "")
    assert reg.encode(b"raw", "text/csv") == (b"raw", "text/csv")  # bytes + explicit type: verbatim
    assert normalize_content_type("Application/JSON; charset=utf-8") == JSON
    assert normalize_content_type("") == JSON
    assert reg.decode(b'{"a":1}', "application/json; charset=utf-8") == {"a": 1}
    with pytest.raises(UnknownContentType, match="text/csv"):
        reg.decode(b"a,b", "text/csv")
    with pytest.raises(UnknownContentType):
        reg.encode({"a": 1}, "text/csv")


def test_user_codec_registration() -> None:
    """A registered codec is used for its content type; copies are independent."""

    class Csv:
        content_type = "text/csv"

        def encode(self, value: Any) -> bytes:
            return ",".join(value).encode()

        def decode(self, data: bytes, type_: Any = Any) -> Any:
            return data.decode().split(",")

    reg = CodecRegistry.default()
    other = reg.copy()
    reg.register(Csv())
    assert reg.encode(["a", "b"], "text/csv") == (b"a,b", "text/csv")
    assert reg.decode(b"a,b", "TEXT/CSV") == ["a", "b"]
    assert "text/csv" in reg and "text/csv" not in other


def test_task_info_decode_uses_content_type() -> None:
    """TaskInfo.decode goes through the codec named by its content_type."""
    info = TaskInfo(id="1", queue="q", type="t", state=TaskState.PENDING, payload=b'{"user_id":3}',
                    content_type=JSON)  # fmt: skip
    assert info.decode(Welcome) == Welcome(user_id=3)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(JSON_VALUES)
def test_json_round_trip_property(value: Any) -> None:
    """Any JSON value survives encode/decode, is compact, and never contains raw <, > or &."""
    codec = JSONCodec()
    data = codec.encode(value)
    assert codec.decode(data) == value
    assert not any(ch in data for ch in (b"<", b">", b"&")) and b"\n" not in data


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet='ab"\\:,.[]{}-e01Z+ \x00', max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_JSON_VALUES)
def test_fast_float_rewrite_equals_the_exact_path(value: Any) -> None:
    """The byte-level float rewrite gives the same bytes as rebuilding the value (strings untouched)."""
    from conveyor_sdk._gojson import encode_go

    assert JSONCodec(html_escape=False).encode(value) == encode_go(value)


_OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
_AWARE = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=_OFFSETS)


def _go_time(value: datetime) -> str:
    """Independent model of Go's RFC 3339 spelling: Z for a zero offset, fraction without trailing zeros."""
    text = value.replace(tzinfo=None).isoformat(timespec="microseconds").rstrip("0").rstrip(".")
    offset = value.utcoffset() or timedelta(0)
    if not offset:
        return text + "Z"
    minutes = abs(offset) // timedelta(minutes=1)
    return f"{text}{'-' if offset < timedelta(0) else '+'}{minutes // 60:02d}:{minutes % 60:02d}"


@settings(max_examples=300, deadline=None)
@given(_AWARE, st.floats(allow_nan=False, allow_infinity=False), st.text(alphabet='0.Z:+-"', max_size=10))
def test_datetimes_next_to_floats_and_look_alikes_match_go(when: datetime, number: float, text: str) -> None:
    """Aware datetimes (any fraction, any offset) come out as Go writes them, whatever surrounds them."""
    data = JSONCodec().encode({"a": 1.0, "at": when, "n": number, "s": text, "z": [when, 2.0]})
    go_when = msgspec.json.encode(_go_time(when))
    assert data.startswith(b'{"a":1,"at":' + go_when + b',"n":' + _go_reference(number).encode() + b',"s":')
    assert data.endswith(b',"z":[' + go_when + b",2]}")
    assert JSONCodec().encode([when]) == b"[" + go_when + b"]"


class _Padded(msgspec.Struct):
    note: str
    value: Any


@settings(max_examples=200, deadline=None)
@given(_JSON_VALUES | _AWARE, st.booleans())
def test_large_payloads_take_the_value_walk_and_still_match_go(value: Any, as_struct: bool) -> None:
    """Past 256 bytes the codec walks the value instead of scanning text; the bytes stay Go's."""
    from conveyor_sdk._gojson import encode_go

    note = "Please review the attached file, then reply. " * 8  # prose: many '.' and 'e'
    payload: Any = _Padded(note=note, value=value) if as_struct else {"note": note, "value": [value, 1]}
    assert JSONCodec(html_escape=False).encode(payload) == encode_go(payload)
