"""CachingEncoder emits exactly the bytes hpack's own encoder would, call after call."""

from __future__ import annotations

from hpack import Decoder, Encoder, NeverIndexedHeaderTuple
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor_sdk._h2kernel.client import CachingEncoder

FIELDS = [
    (":method", "POST"),
    (":path", "/conveyor.v1.TaskService/Enqueue"),
    ("content-type", "application/proto"),
    ("connect-timeout-ms", "30000"),
    ("connect-timeout-ms", "5000"),
    ("x-big", "v" * 3000),  # evicts others from a 4 KiB table
    NeverIndexedHeaderTuple("authorization", "Bearer s3cret"),
    ("authorization", "Bearer s3cret"),
]

steps = st.lists(
    st.one_of(
        st.lists(st.sampled_from(FIELDS), min_size=1, max_size=6).map(lambda fs: ("encode", fs)),
        st.sampled_from([0, 256, 4096, 8192]).map(lambda size: ("resize", size)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_same_bytes_as_hpack(script: list[tuple[str, object]]) -> None:
    """Any mix of repeated header lists and table resizes encodes identically (and decodes back)."""
    ours, plain, decoder = CachingEncoder(), Encoder(), Decoder()
    resized = False  # hpack's decoder is only checked on fixed-size tables (its resize rules differ)
    for op, arg in script:
        if op == "resize":
            ours.header_table_size = plain.header_table_size = arg  # type: ignore[assignment]
            resized = True
            continue
        fields = list(arg)  # type: ignore[call-overload]
        block = ours.encode(fields)
        assert block == plain.encode(fields)
        if not resized:
            assert [(n, v) for n, v in decoder.decode(block)] == [(n, v) for n, v in fields]


def test_reuses_blocks_and_keeps_secrets_unindexed() -> None:
    """A repeated list is served from the cache; a never-indexed field never matches a plain one."""
    enc = CachingEncoder()
    fields = [(":method", "POST"), ("content-type", "application/proto")]
    first = enc.encode(fields)  # indexes content-type: not cached
    again = enc.encode(fields)
    assert enc.encode(fields) == again != first
    assert enc.reused == 1
    secret = [NeverIndexedHeaderTuple("authorization", "Bearer x")]
    plain = [("authorization", "Bearer x")]
    assert enc.encode(secret) == enc.encode(secret)
    assert enc.encode(plain) != enc.encode(secret)
