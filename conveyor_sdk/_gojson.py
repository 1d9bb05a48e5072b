"""Go ``encoding/json`` spelling for the values msgspec writes differently (floats, datetimes, int keys).

msgspec's compact output already equals Go's for strings, ints, bools, null,
struct field order and sorted string keys, and for most floats (``0.1``,
``3.25``, ``0.00001``). It differs for integral floats (``1.0`` vs ``1``),
floats it writes with an exponent (``1e20``, ``1e-6`` vs Go's
``100000000000000000000``, ``0.000001``, ``1e+21``), datetime fractions with
trailing zeros (``.100000`` vs ``.1``) and maps with int keys (refused under
sorted output; Go writes them as strings sorted as strings).

:func:`needs_rewrite` is a byte scan of msgspec's output that finds every
place those can occur (and, rarely, a look-alike inside a string); only then
does :func:`encode_go` rebuild the value: builtins via ``msgspec.to_builtins``
(struct field order kept, string-keyed dicts sorted), floats as
``msgspec.Raw`` in Go's spelling, datetimes trimmed, int keys turned into
strings sorted as strings.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

import msgspec

__all__ = ["FLOATS", "VALUES", "encode_go", "go_datetime", "go_float", "needs_rewrite", "rewrite_floats"]

# Where msgspec's bytes can differ from Go's: one C-speed scan for short triggers, then a check
# around each (rare) hit.
_INTEGRAL = re.compile(rb"[0-9]\.0(?![0-9])")  # 1.0 -> Go 1
_EXPONENT = re.compile(rb"[0-9]e-?[0-9]+(?:[,\]}]|$)")  # 1e-6, 1e20 -> Go 0.000001, 1e+20...
_TIME_ZERO = re.compile(rb':[0-9][0-9]\.[0-9]*0(?:Z"|[+-][0-9][0-9]:[0-9][0-9]")')  # .100000Z -> .1Z
_TRIGGER = re.compile(rb'\.0|e[-0-9]|0(?:Z"|[+-])')
_CHECKS = {ord("."): (_INTEGRAL, 1, 3), ord("e"): (_EXPONENT, 1, 8), ord("0"): (_TIME_ZERO, 12, 10)}
_FRACTION_ZEROS = re.compile(r"(\.\d*?)0+(?=Z|[+-]\d\d:\d\d$)")
_PLAIN = msgspec.json.Encoder()


FLOATS = 1  # only float spellings differ: rewrite the number tokens of the bytes
VALUES = 2  # datetimes (strings in the output) differ: rebuild from the value


def needs_rewrite(data: bytes) -> int:
    """0, :data:`FLOATS` or :data:`VALUES`: what msgspec's bytes need to become Go's."""
    hit = _TRIGGER.search(data)
    while hit is not None:
        at = hit.start()
        check, before, after = _CHECKS[data[at]]
        if check.search(data, max(0, at - before), at + after):
            if check is _TIME_ZERO:
                return VALUES
            return VALUES if _TIME_ZERO.search(data, at) else FLOATS
        hit = _TRIGGER.search(data, at + 1)
    return 0


# Skipped whole: strings, punctuation, and numbers msgspec already spells like Go (ints, fractions
# without exponent; msgspec never writes a trailing zero except in ``.0``). Captured: the next number
# that differs (``1.0``, ``1e-6``, ``1e20``), or nothing at the end (so a search never restarts inside
# a string).
_NUMBER = re.compile(
    rb'(?:"(?:[^"\\]++|\\.)*+"|[^"0-9-]++|-?[0-9]++(?:\.[0-9]*[1-9])?(?![.0-9e]))*+'  # possessive: linear
    rb"(?:(-?[0-9]+(?:\.0(?![0-9])|(?:\.[0-9]+)?e[+-]?[0-9]+))|$)"
)


def _number(match: re.Match[bytes]) -> bytes:
    token = match.group(1)
    if token is None:
        return match.group(0)
    head = match.group(0)[: match.start(1) - match.start(0)]
    if b"e" in token:
        return head + go_float(float(token)).encode()
    return head + token[:-2]  # 1.0 -> 1


def rewrite_floats(data: bytes) -> bytes:
    """msgspec's bytes with every float token in Go's spelling (strings untouched)."""
    return _NUMBER.sub(_number, data)


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
    text: str = msgspec.json.decode(_PLAIN.encode(value))
    return _FRACTION_ZEROS.sub(lambda m: "" if m.group(1) == "." else m.group(1), text)


def _key(key: Any) -> str:
    if isinstance(key, bool) or not isinstance(key, int | str):
        raise TypeError(f"map keys must be str or int, got {type(key).__name__}")
    return str(key)


def _walk(node: Any) -> Any:
    if isinstance(node, float):
        return msgspec.Raw(go_float(node).encode())
    if isinstance(node, datetime):
        return go_datetime(node)
    if isinstance(node, dict):
        if all(type(k) is str for k in node):
            return {k: _walk(v) for k, v in node.items()}  # already in the right order
        items = sorted((_key(k), v) for k, v in node.items())
        return {k: _walk(v) for k, v in items}
    if isinstance(node, list | tuple):
        return [_walk(v) for v in node]
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
