"""Go ``encoding/json`` spelling for the values msgspec writes differently (floats, datetimes, int keys).

msgspec's compact output already equals Go's for strings, ints, bools, null,
struct field order and sorted string keys, and for most floats (``0.1``,
``3.25``, ``0.00001``). It differs for integral floats (``1.0`` vs ``1``),
floats it writes with an exponent (``1e20``, ``1e-6`` vs Go's
``100000000000000000000``, ``0.000001``, ``1e+21``), datetime fractions with
trailing zeros (``.100000`` vs ``.1``) and maps with int keys (refused under
sorted output; Go writes them as strings sorted as strings).

A few ``re`` searches of msgspec's output (:func:`go_bytes`) find every
place those can occur (and, rarely, a look-alike inside a string). Floats are
then fixed in the bytes (:func:`rewrite_floats`, strings cut out first);
datetimes and int keys make :func:`encode_go` rebuild the value: builtins via
``msgspec.to_builtins`` (struct field order kept, string-keyed dicts sorted),
floats as ``msgspec.Raw`` in Go's spelling, datetimes trimmed, int keys turned
into strings sorted as strings.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

import msgspec

__all__ = ["encode_go", "go_bytes", "go_datetime", "go_float", "rewrite_floats"]

# Where msgspec's bytes can differ from Go's. Each pattern starts with one literal byte and puts its
# look-behind after it, so ``re`` runs its tight first-byte loop (a charset test per byte or a Python
# pass is several times slower on a KiB of text); hits are rare, and a look-alike inside a string only
# costs the (exact) rewrite. msgspec writes a fraction ``.0`` only for integral floats, an exponent
# only as ``e-N`` (equal to Go's below 1e-6, except ``e-6``) or ``eN`` (>= 1e16, never Go's), and
# datetime fractions with all six digits.
_TAIL = rb"(?:Z|[+-][0-9][0-9]:[0-9][0-9])\""
# 1.0 -> 1; group 1: a datetime fraction ending in 0 (.100000Z -> .1Z)
_DOT = re.compile(rb"\.(?:(?<=[0-9]\.)0(?![0-9])|(?<=:[0-9][0-9]\.)[0-9]{5}(0)" + _TAIL + b")")
_EXPONENT = re.compile(rb"e(?<=[0-9]e)(?:-6(?![0-9])|[0-9])")  # 1.5e-6, 1e20 -> 0.0000015, 1e+20...
_TIME_ZERO = re.compile(  # the closing quote of a datetime whose fraction ends in 0
    rb'"(?<=:[0-9][0-9]\.[0-9]{5}0Z")|"(?<=:[0-9][0-9]\.[0-9]{5}0[+-][0-9][0-9]:[0-9][0-9]")'
)
_PLAIN = msgspec.json.Encoder()


# Past this size a walk of the value (cost per node) beats the byte scans (cost per ``.``/``e`` in the
# text): a KiB of prose holds ~100 ``e``s, one match attempt each.
_WALK_FROM = 256
_SCALARS = (str, int, bool, bytes, type(None))


def _spelled_alike(value: Any, depth: int = 0) -> bool:
    """True if ``value`` holds no float and no datetime (so msgspec's bytes are Go's already).

    Containers are walked (dicts, lists, tuples, msgspec Structs) up to a small depth; any other
    type, or a deeper value, answers False and the bytes are scanned instead.
    """
    if depth > 8:
        return False
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is dict:
        return all(_spelled_alike(v, depth + 1) for v in value.values())
    if kind is list or kind is tuple:
        return all(_spelled_alike(v, depth + 1) for v in value)
    fields = getattr(kind, "__struct_fields__", None)
    if fields is not None:
        return all(_spelled_alike(getattr(value, f), depth + 1) for f in fields)
    return False


def go_bytes(data: bytes, value: Any) -> bytes:
    """msgspec's compact bytes for ``value`` turned into Go's (``data`` itself when they agree)."""
    if len(data) >= _WALK_FROM and _spelled_alike(value):
        return data
    hit = _DOT.search(data)
    if hit is None:
        return rewrite_floats(data) if _EXPONENT.search(data) else data
    if hit.start(1) >= 0 or _TIME_ZERO.search(data, hit.end()):
        return encode_go(value)  # a datetime to trim: only the value tells it from a look-alike string
    return rewrite_floats(data)


# The rewrite works on the skeleton: msgspec's bytes with every string cut out (a NUL, which only
# occurs escaped in JSON, marks each cut), so number-like text inside a string is never seen. All of
# it runs in ``re``'s C code (a literal replacement); only exponent floats call back into Python.
_STRINGS = re.compile(rb'("(?:[^"\\]++|\\.)*+")')  # possessive: linear
_INTEGRAL = re.compile(rb"\.0(?![0-9])")  # 1.0 -> 1
_E_TOKEN = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?e[+-]?[0-9]+")


def _e_token(match: re.Match[bytes]) -> bytes:
    return go_float(float(match.group())).encode()


def rewrite_floats(data: bytes) -> bytes:
    """msgspec's bytes with every float token in Go's spelling (strings untouched)."""
    if data.find(b'"') < 0:  # no strings (a list of numbers): no cutting needed
        return _fix_numbers(data)
    pieces = _STRINGS.split(data)  # outside, string, outside, ..., outside
    pieces[::2] = _fix_numbers(b"\0".join(pieces[::2])).split(b"\0")
    return b"".join(pieces)


def _fix_numbers(skeleton: bytes) -> bytes:
    skeleton = _INTEGRAL.sub(b"", skeleton)
    return _E_TOKEN.sub(_e_token, skeleton) if _EXPONENT.search(skeleton) else skeleton


def _digits(f: float) -> tuple[str, int]:
    """Shortest round-trip digits (no leading/trailing zeros) and the exponent of the first digit."""
    mant, _, exp = repr(abs(f)).partition("e")
    whole, _, frac = mant.partition(".")
    digits = whole + frac
    point = len(whole) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    return stripped.rstrip("0"), point - 1


def _fixed(sign: str, digits: str, exp: int) -> str:
    """Go's 'f' form of ``0.<digits> * 10**(exp + 1)``."""
    if exp >= len(digits) - 1:
        return sign + digits + "0" * (exp - len(digits) + 1)
    if exp >= 0:
        return f"{sign}{digits[: exp + 1]}.{digits[exp + 1 :]}"
    return f"{sign}0.{'0' * (-exp - 1)}{digits}"


def go_float(f: float) -> str:
    """``json.Marshal(float64)``: ``FormatFloat(f, 'f' or 'e', -1, 64)``, ``e-07`` cleaned to ``e-7``."""
    if math.isnan(f) or math.isinf(f):
        return "null"  # Go refuses these; msgspec writes null (documented difference)
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    text = repr(f)
    if "e" not in text and 1e-6 <= abs(f) < 1e21:
        return text.removesuffix(".0")  # repr is already Go's 'f' form
    sign = "-" if f < 0 else ""
    digits, exp = _digits(f)
    if 1e-6 <= abs(f) < 1e21:
        return _fixed(sign, digits, exp)
    head = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{head}e{'-' if exp < 0 else '+'}{abs(exp) if exp < 0 else f'{exp:02d}'}"


def go_datetime(value: datetime) -> str:
    """RFC 3339 with the fraction's trailing zeros dropped (Go's ``time.RFC3339Nano``)."""
    text = _PLAIN.encode(value)[1:-1].decode()
    head, dot, rest = text.partition(".")
    zone = rest.lstrip("0123456789")
    if not dot or (zone != "Z" and len(zone) != 6):
        return text  # no fraction, or naive / seconds offset: msgspec's spelling (see docs/client.md)
    digits = rest[: len(rest) - len(zone)].rstrip("0")
    return f"{head}.{digits}{zone}" if digits else head + zone


def _key(key: Any) -> str:
    if isinstance(key, bool) or not isinstance(key, int | str):
        raise TypeError(f"map keys must be str or int, got {type(key).__name__}")
    return str(key)


def _walk(node: Any) -> Any:
    kind = type(node)  # to_builtins leaves dict, list, str, int, float, bool, None and datetimes
    if kind is dict:
        if not node or type(next(iter(node))) is str:  # sorted keys: mixed types raised in to_builtins
            return {k: _walk(v) for k, v in node.items()}  # already in the right order
        items = sorted((_key(k), v) for k, v in node.items())
        return {k: _walk(v) for k, v in items}
    if kind is list:
        return [_walk(v) for v in node]
    if isinstance(node, float):
        return msgspec.Raw(go_float(node).encode())
    if isinstance(node, datetime):
        return go_datetime(node)
    return node


def encode_go(value: Any) -> bytes:
    """Encode ``value`` exactly as Go would (the slow path; raises TypeError/EncodeError)."""
    try:
        tree = msgspec.to_builtins(value, builtin_types=(datetime,), order="deterministic")
    except TypeError as exc:
        if "not supported between" in str(exc):
            raise TypeError("a map mixes key types (Go maps have one key type)") from None
        raise
    return _PLAIN.encode(_walk(tree))
