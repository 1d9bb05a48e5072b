"""Go ``x/mod/semver`` rules: a version needs the ``v`` prefix; ``v1`` and ``v1.2`` are shorthands.

Pure functions. ``parse`` returns None for anything that is not semver under
those rules (e.g. ``1.2.0``, ``devel``, ``conveyor-py/0.1.0``).
"""

from __future__ import annotations

import re

__all__ = ["compare", "is_semver", "parse"]

_NUM = r"(0|[1-9][0-9]*)"
_IDENT = r"[0-9A-Za-z-]+"
_FULL = re.compile(
    rf"v{_NUM}(?:\.{_NUM}(?:\.{_NUM}(?:-(?P<pre>{_IDENT}(?:\.{_IDENT})*))?(?:\+{_IDENT}(?:\.{_IDENT})*)?)?)?"
)

Version = tuple[int, int, int, tuple[str, ...]]


def parse(text: str) -> Version | None:
    match = _FULL.fullmatch(text)
    if match is None:
        return None
    major, minor, patch = match.group(1), match.group(2), match.group(3)
    pre = match.group("pre")
    if pre is not None and any(p.isdigit() and len(p) > 1 and p[0] == "0" for p in pre.split(".")):
        return None
    return (int(major), int(minor or 0), int(patch or 0), tuple(pre.split(".")) if pre else ())


def is_semver(text: str) -> bool:
    return parse(text) is not None


def _cmp_pre(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    if a == b or not a or not b:
        return 0 if a == b else (1 if not a else -1)
    for x, y in zip(a, b, strict=False):
        if x == y:
            continue
        xn, yn = x.isdigit(), y.isdigit()
        if xn and yn:
            return -1 if int(x) < int(y) else 1
        if xn != yn:
            return -1 if xn else 1
        return -1 if x < y else 1
    return -1 if len(a) < len(b) else 1


def compare(a: str, b: str) -> int:
    """-1, 0 or 1; both must be valid (see :func:`parse`)."""
    va, vb = parse(a), parse(b)
    if va is None or vb is None:
        raise ValueError(f"not semver: {a!r} / {b!r}")
    if va[:3] != vb[:3]:
        return -1 if va[:3] < vb[:3] else 1
    return _cmp_pre(va[3], vb[3])
