"""A faster HPACK decoder for the common request header block, with hpack as the authority.

Clients of a task queue send the same few headers on every call: indexed fields
(``:method``, ``content-type``, ...) and a couple of literals that are never
added to the dynamic table (``:path``, ``content-length``), usually Huffman-coded.
hpack decodes every field through debug logging and a pure-Python Huffman
decoder, and that is the first thing on a task's way from the producer's socket
to a worker (often on a cold CPU: an idle server woken by one Enqueue).

:class:`FastDecoder` reads such blocks itself. Indexed fields come from hpack's
header table; a literal whose name is a static-table index or a literal string
is decoded once per connection and then found by its exact bytes (its meaning
does not depend on the dynamic table); 64 such fields of at most 512 bytes are
kept. Anything else - a literal that adds to the dynamic table, a table size
update, a literal naming a dynamic entry, a literal over 512 bytes, malformed or
oversized input - hands the whole block to hpack's own decoder, which then
decodes it (and raises) exactly as before. The fast path never changes decoder
state, so falling back midway is safe.
"""

from __future__ import annotations

from typing import Any

from hpack import Decoder, HeaderTuple, NeverIndexedHeaderTuple
from hpack.exceptions import HPACKError
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

__all__ = ["FastDecoder"]

_STATIC = HeaderTable.STATIC_TABLE_LENGTH
_MAX_FIELDS = 64  # literal fields remembered per connection (then the memory starts again)
_MAX_FIELD_BYTES = 512  # longer literal fields are left to hpack (and never remembered)
_MAX_BLOCKS = 64  # whole header blocks remembered per connection (then the memory starts again) ...
_MAX_BLOCK_BYTES = 1024  # ... each at most this long


class _Slow(Exception):
    """The block needs hpack's decoder (state change, dynamic name, or anything unusual)."""


def _integer(data: bytes, i: int, bits: int) -> tuple[int, int]:
    """RFC 7541 §5.1 integer with a ``bits`` prefix at ``data[i]``; returns (value, next index)."""
    mask = (1 << bits) - 1
    value = data[i] & mask
    i += 1
    if value < mask:
        return value, i
    shift = 0
    while True:
        byte = data[i]
        i += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
        if shift > 28:
            raise _Slow


def _string(data: bytes, i: int) -> tuple[bytes, int]:
    """A length-prefixed (maybe Huffman-coded) string at ``data[i]``; returns (bytes, next index)."""
    huffman = data[i] & 0x80
    length, i = _integer(data, i, 7)
    end = i + length
    if end > len(data):
        raise _Slow
    raw = data[i:end]
    return (decode_huffman(raw) if huffman else raw), end


class FastDecoder(Decoder):
    """hpack's ``Decoder`` with a fast path for blocks that leave the dynamic table alone."""

    def __init__(self) -> None:
        super().__init__()
        self._fields: dict[bytes, HeaderTuple] = {}
        # Whole blocks the fast path read, with their header-list size. Their meaning depends on
        # the dynamic table, which only hpack's own decoder changes: it forgets them all.
        self._blocks: dict[bytes, tuple[list[HeaderTuple], int]] = {}

    @property
    def header_table_size(self) -> int:
        return int(self.header_table.maxsize)

    @header_table_size.setter
    def header_table_size(self, value: int) -> None:
        self._blocks.clear()  # a smaller table evicts entries the remembered blocks may name
        self.header_table.maxsize = value

    def decode(self, data: bytes, raw: bool = False) -> Any:
        if raw and type(data) is bytes:
            headers = self.decode_cached(data)
            if headers is not None:
                return headers
        self._blocks.clear()
        return super().decode(data, raw)

    def decode_cached(self, data: bytes) -> list[HeaderTuple] | None:
        """The block's headers if they can be read without changing HPACK state, else None.

        None means: hand the block to :meth:`decode` (hpack's decoder), which may change the
        dynamic table or raise. Nothing is changed here but the memory of decoded blocks.
        """
        if self.header_table_size > self.max_allowed_table_size:
            return None  # hpack raises InvalidTableSizeError unless the block resizes the table
        known = self._blocks.get(data)
        if known is not None:
            headers, size = known
            return headers if size <= self.max_header_list_size else None
        try:
            headers, size = self._fast(data)
        except (_Slow, IndexError, HPACKError):
            return None
        if len(data) <= _MAX_BLOCK_BYTES:
            if len(self._blocks) >= _MAX_BLOCKS:
                self._blocks.clear()
            self._blocks[data] = (headers, size)
        return headers

    def _fast(self, data: bytes) -> tuple[list[HeaderTuple], int]:
        table, fields, limit = self.header_table, self._fields, self.max_header_list_size
        headers: list[HeaderTuple] = []
        size = i = 0
        end = len(data)
        while i < end:
            first = data[i]
            if first & 0x80:  # indexed field
                index, i = _integer(data, i, 7)
                header = HeaderTuple(*table.get_by_index(index))
            elif first & 0x60:  # literal that is indexed (changes the table) or a table size update
                raise _Slow
            else:  # literal without indexing / never indexed
                start = i
                i = self._skip_literal(data, i)
                if i - start > _MAX_FIELD_BYTES:
                    raise _Slow  # long literals: hpack decodes them once, not us first
                key = data[start:i]
                cached = fields.get(key)
                header = cached if cached is not None else self._literal(key)
            size += 32 + len(header[0]) + len(header[1])
            if size > limit:
                raise _Slow  # hpack raises its OversizedHeaderListError
            headers.append(header)
        return headers, size

    @staticmethod
    def _skip_literal(data: bytes, i: int) -> int:
        name_index, j = _integer(data, i, 4)
        if name_index > _STATIC:
            raise _Slow  # the name lives in the dynamic table: its meaning can change
        if not name_index:
            length, j = _integer(data, j, 7)
            j += length
        length, j = _integer(data, j, 7)
        j += length
        if j > len(data):
            raise _Slow
        return j

    def _literal(self, field: bytes) -> HeaderTuple:
        name_index, i = _integer(field, 0, 4)
        if name_index:
            name = self.header_table.get_by_index(name_index)[0]
        else:
            name, i = _string(field, i)
        value, _ = _string(field, i)
        cls = NeverIndexedHeaderTuple if field[0] & 0x10 else HeaderTuple
        header: HeaderTuple = cls(name, value)
        if len(self._fields) >= _MAX_FIELDS:
            self._fields.clear()
        self._fields[field] = header
        return header
