"""Payload codecs keyed by ``content_type`` (protocol §3).

The server never looks inside a payload; producer and consumer agree on bytes
through the ``content_type``. Built in:

``application/json`` (the default)
    Compact UTF-8 JSON via msgspec. Typed decoding into msgspec Structs,
    dataclasses, TypedDicts and plain JSON values. The bytes are exactly what
    Go's ``encoding/json`` writes for the same value: map keys sorted (int keys
    as strings, sorted as strings), struct fields in declaration order, floats
    in Go's ``'f'``/``'e'`` spelling (``1.0`` -> ``1``, ``1e-6`` -> ``0.000001``,
    ``1e21`` -> ``1e+21``), aware datetimes as RFC 3339 without trailing
    fraction zeros, and ``<``, ``>``, ``&``, U+2028, U+2029 escaped as
    ``\\u003c``... (``JSONCodec(html_escape=False)`` turns that off). What still
    differs (NaN/Infinity as ``null``, naive datetimes, lone surrogates, types
    Go has no encoding for) is listed in ``docs/client.md``.
``application/octet-stream``
    Bytes verbatim.
``application/x-protobuf``
    The wire encoding of a protobuf message; decoding needs the message class.

A received ``content_type`` without a codec raises :class:`UnknownContentType`
(never a guess). An empty ``content_type`` means the protocol default,
``application/json``. On a worker both :class:`UnknownContentType` and
:class:`PayloadDecodeError` become ``SKIP_RETRY``: the same bytes will fail the
same way on every attempt, so retrying only burns the retry budget.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import msgspec
from google.protobuf.message import (  # type: ignore[import-untyped]  # protobuf ships no stubs
    DecodeError as _ProtoDecodeError,
)
from google.protobuf.message import Message as _ProtoMessage

from conveyor_sdk._gojson import encode_go, go_bytes
from conveyor_sdk.errors import InvalidArgument

__all__ = [
    "JSON",
    "OCTET_STREAM",
    "PROTOBUF",
    "Codec",
    "CodecError",
    "CodecRegistry",
    "JSONCodec",
    "OctetStreamCodec",
    "PayloadDecodeError",
    "ProtobufCodec",
    "UnknownContentType",
    "content_type_for",
    "normalize_content_type",
]

_BYTES = (bytes, bytearray, memoryview)

JSON = "application/json"
OCTET_STREAM = "application/octet-stream"
PROTOBUF = "application/x-protobuf"


class CodecError(InvalidArgument, ValueError):
    """A payload could not be encoded or decoded (also a ValueError)."""

    def __str__(self) -> str:
        return self.message


class UnknownContentType(CodecError):
    """No codec is registered for a content_type."""


class PayloadDecodeError(CodecError):
    """The payload bytes do not decode into the expected type."""


@runtime_checkable
class Codec(Protocol):
    """Turns values into payload bytes and back for one ``content_type``."""

    content_type: str

    def encode(self, value: Any) -> bytes:
        """Encode ``value``; raise :class:`CodecError` when it cannot."""
        ...

    def decode(self, data: bytes, type_: Any = Any) -> Any:
        """Decode ``data`` into ``type_`` (``Any`` = the codec's natural form)."""
        ...


def normalize_content_type(content_type: str) -> str:
    """Lower-case, parameters stripped; empty means the default ``application/json``."""
    base = content_type.split(";", 1)[0].strip().lower()
    return base or JSON


_GO_ESCAPES = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


class JSONCodec:
    """``application/json`` through msgspec (see the module docstring for Go parity)."""

    content_type: str = JSON

    def __init__(self, *, html_escape: bool = True) -> None:
        self.html_escape = html_escape
        self._encoder = msgspec.json.Encoder(order="deterministic")
        self._decoders: dict[Any, msgspec.json.Decoder[Any]] = {}

    def encode(self, value: Any) -> bytes:
        """Compact JSON with Go's bytes; ``<``, ``>``, ``&``, U+2028/9 escaped like Go unless disabled."""
        try:
            data = go_bytes(self._encoder.encode(value), value)
        except (TypeError, UnicodeEncodeError, msgspec.EncodeError):
            try:  # int map keys: refused by msgspec's sorted mode, written by Go as sorted strings
                data = encode_go(value)
            except (TypeError, UnicodeEncodeError, msgspec.EncodeError) as exc:
                raise CodecError(f"cannot encode {type(value).__name__} as JSON: {exc}") from exc
        # ``find`` (a memchr) rather than ``in``, which first tries the needle as an int (a TypeError).
        if self.html_escape and (
            data.find(b"<") >= 0 or data.find(b">") >= 0 or data.find(b"&") >= 0 or data.find(b"\xe2") >= 0
        ):  # \xe2: the lead byte of U+2028 and U+2029
            for raw, escaped in _GO_ESCAPES:  # only inside JSON strings, so a plain replace is exact
                data = data.replace(raw, escaped)
        return data

    def decode(self, data: bytes, type_: Any = Any) -> Any:
        """Parse (and validate against ``type_``); empty bytes decode as ``None``."""
        if not data and type_ is Any:
            return None
        decoder = self._decoders.get(type_)
        if decoder is None:
            decoder = self._decoders[type_] = msgspec.json.Decoder(type_)
        try:
            return decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise PayloadDecodeError(f"JSON payload does not decode as {_type_name(type_)}: {exc}") from exc


class OctetStreamCodec:
    """``application/octet-stream``: bytes verbatim."""

    content_type: str = OCTET_STREAM

    def encode(self, value: Any) -> bytes:
        """Accept bytes, bytearray or memoryview only."""
        if isinstance(value, _BYTES):
            return bytes(value)
        raise CodecError(f"{OCTET_STREAM} payloads must be bytes, got {type(value).__name__}")

    def decode(self, data: bytes, type_: Any = Any) -> Any:
        """Return the bytes (``bytearray``/``memoryview`` targets are honoured)."""
        if type_ in (bytearray, memoryview):
            return type_(data)
        return bytes(data)


class ProtobufCodec:
    """``application/x-protobuf``: ``SerializeToString`` / ``FromString``."""

    content_type: str = PROTOBUF

    def encode(self, value: Any) -> bytes:
        """Serialize a protobuf message instance."""
        if not isinstance(value, _ProtoMessage):
            raise CodecError(f"{PROTOBUF} payloads must be protobuf messages, got {type(value).__name__}")
        data: bytes = value.SerializeToString()
        return data

    def decode(self, data: bytes, type_: Any = Any) -> Any:
        """Parse into the message class ``type_`` (required)."""
        if not (isinstance(type_, type) and issubclass(type_, _ProtoMessage)):
            raise PayloadDecodeError(f"decoding {PROTOBUF} needs a protobuf message class, got {type_!r}")
        cls: Any = type_
        try:
            return cls.FromString(data)
        except _ProtoDecodeError as exc:
            raise PayloadDecodeError(f"payload is not a valid {cls.DESCRIPTOR.full_name}: {exc}") from exc


def _type_name(type_: Any) -> str:
    return type_.__name__ if isinstance(type_, type) else repr(type_)


class CodecRegistry:
    """Codecs by normalized ``content_type``; pick one per value when none is named.

    Create one with :meth:`default` (JSON, octet-stream, protobuf) and add your
    own with :meth:`register`. Registries are plain objects, not globals: give
    the same one to a :class:`~conveyor_sdk.client.Client` and an
    :class:`~conveyor_sdk.app.App` to share custom codecs.
    """

    def __init__(self, codecs: tuple[Codec, ...] = ()) -> None:
        self._codecs: dict[str, Codec] = {}
        for codec in codecs:
            self.register(codec)

    @classmethod
    def default(cls) -> CodecRegistry:
        """A fresh registry holding the three built-in codecs."""
        builtin: tuple[Codec, ...] = (JSONCodec(), OctetStreamCodec(), ProtobufCodec())
        return cls(builtin)

    def register(self, codec: Codec) -> None:
        """Add (or replace) the codec for ``codec.content_type``."""
        self._codecs[normalize_content_type(codec.content_type)] = codec

    def get(self, content_type: str) -> Codec:
        """The codec for ``content_type``; :class:`UnknownContentType` when none."""
        codec = self._codecs.get(content_type)  # fast path: already normalized
        if codec is not None:
            return codec
        key = normalize_content_type(content_type)
        try:
            return self._codecs[key]
        except KeyError:
            known = ", ".join(sorted(self._codecs))
            raise UnknownContentType(
                f"no codec for content_type {content_type!r} (registered: {known})"
            ) from None

    def __contains__(self, content_type: str) -> bool:
        return normalize_content_type(content_type) in self._codecs

    def __iter__(self) -> Iterator[str]:
        return iter(self._codecs)

    def copy(self) -> CodecRegistry:
        """An independent registry with the same codecs."""
        return CodecRegistry(tuple(self._codecs.values()))

    def encode(self, value: Any, content_type: str | None = None) -> tuple[bytes, str]:
        """``(payload, content_type)`` for ``value``; ``None`` -> empty payload, no content_type.

        With no ``content_type`` the choice follows the value: bytes-like ->
        octet-stream, protobuf message -> x-protobuf, anything else -> JSON.
        Bytes with an explicit ``content_type`` are taken as already encoded.
        """
        if content_type is None:
            if value is None:
                return b"", ""
            content_type = content_type_for(value)
        if isinstance(value, _BYTES):
            return bytes(value), content_type
        return self.get(content_type).encode(value), content_type

    def decode(self, data: bytes, content_type: str, type_: Any = Any) -> Any:
        """Decode through the codec for ``content_type``."""
        return self.get(content_type).decode(data, type_)

    def __repr__(self) -> str:
        return f"CodecRegistry({sorted(self._codecs)})"


def content_type_for(value_or_type: Any) -> str:
    """Default content_type for a value or an annotation type."""
    obj = value_or_type
    if isinstance(obj, type):
        if issubclass(obj, _BYTES):
            return OCTET_STREAM
        if issubclass(obj, _ProtoMessage):
            return PROTOBUF
        return JSON
    if isinstance(obj, _BYTES):
        return OCTET_STREAM
    if isinstance(obj, _ProtoMessage):
        return PROTOBUF
    return JSON
