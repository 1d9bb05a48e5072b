"""The fast HPACK decoder gives exactly hpack's headers, errors and table state, block after block."""

from __future__ import annotations

import hpack
import pytest
from hpack.exceptions import HPACKError
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor_sdk._h2kernel.hpackfast import FastDecoder
from conveyor_server_min._http.h2stream import header_dict

_NAMES = [b":method", b":path", b"content-type", b"content-length", b"x-custom", b"authorization"]
_header = st.tuples(st.sampled_from(_NAMES), st.binary(max_size=40))
_block = st.lists(_header, max_size=8)
_Headers = list[tuple[bytes, bytes]]


def _same(blocks: list[bytes], max_list: int = 1 << 16) -> None:
    """Decode ``blocks`` in order with both decoders and compare every outcome and the tables."""
    fast, ref = FastDecoder(), hpack.Decoder()
    fast.max_header_list_size = ref.max_header_list_size = max_list
    for block in blocks:
        try:
            want = ("ok", [(type(h), h) for h in ref.decode(block, raw=True)])
        except HPACKError as exc:
            want = ("error", type(exc))
        try:
            got = ("ok", [(type(h), h) for h in fast.decode(block, raw=True)])
        except HPACKError as exc:
            got = ("error", type(exc))
        assert got == want
        assert list(fast.header_table.dynamic_entries) == list(ref.header_table.dynamic_entries)
        if want[0] == "error":
            return  # the connection ends on a decoding error: later blocks mean nothing


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_block, st.booleans(), st.booleans()), min_size=1, max_size=6))
def test_encoder_blocks_decode_as_hpack_does(specs: list[tuple[_Headers, bool, bool]]) -> None:
    """Blocks from a real encoder (indexed, literal, never-indexed, Huffman or not) decode identically."""
    enc = hpack.Encoder()
    blocks = []
    for headers, huffman, sensitive in specs:
        fields = [hpack.NeverIndexedHeaderTuple(n, v) for n, v in headers] if sensitive else headers
        blocks.append(enc.encode(fields, huffman=huffman))
    _same(blocks)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=48), min_size=1, max_size=4))
def test_arbitrary_bytes_decode_or_fail_as_hpack_does(blocks: list[bytes]) -> None:
    """Garbage (truncated strings, bad indexes, bad Huffman, size updates) fails or succeeds as in hpack."""
    _same(blocks)


def _literal(name_index: int, value: bytes) -> bytes:
    """A literal field without indexing, static name index < 15, raw value shorter than 127 bytes."""
    return bytes([name_index, len(value)]) + value


def test_repeated_request_block_uses_the_remembered_literals() -> None:
    """A client's repeated block (literals without indexing, as pyqwest sends) decodes to the same fields."""
    path = b"/conveyor.v1.TaskService/Enqueue"
    block = b"\x83" + _literal(4, path) + b"\x0f\x0d\x0260"  # POST, :path, content-length (index 28)
    fast = FastDecoder()
    one = fast.decode(block, raw=True)
    two = fast.decode(block, raw=True)
    assert one == two == [(b":method", b"POST"), (b":path", path), (b"content-length", b"60")]
    assert one[1] is two[1]  # remembered, not decoded again
    _same([block, block])


def test_oversized_header_list_fails_as_hpack_does() -> None:
    """A block over max_header_list_size raises hpack's OversizedHeaderListError from the fast decoder too."""
    block = hpack.Encoder().encode([(b"x-custom", b"v" * 100)], huffman=False)
    fast = FastDecoder()
    fast.max_header_list_size = 64
    with pytest.raises(hpack.OversizedHeaderListError):
        fast.decode(block, raw=True)
    _same([block], max_list=64)


def test_long_literal_is_left_to_hpack_and_not_remembered() -> None:
    """A literal longer than 512 bytes decodes as in hpack and is not kept by the connection."""
    value = b"v" * 600
    block = b"\x83\x04\x7f\xd9\x03" + value  # POST, then :path with length 600 = 127 + 89 + 3 * 128
    fast = FastDecoder()
    assert fast.decode(block, raw=True) == [(b":method", b"POST"), (b":path", value)]
    assert not fast._fields
    _same([block, block])


def test_header_dict_remembers_only_short_fields() -> None:
    """Decoded header fields are remembered per connection only when short (bounded memory)."""
    seen: dict[object, tuple[str, str]] = {}
    raw = [(b"Content-Type", b"application/proto"), (b"x-big", b"b" * 600), (b"x-big", b"c")]
    assert header_dict(raw, seen) == {"content-type": "application/proto", "x-big": "b" * 600 + ", c"}
    assert set(seen) == {(b"Content-Type", b"application/proto"), (b"x-big", b"c")}
