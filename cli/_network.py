"""Errors from the network in words: one line naming the address and what to check.

The HTTP client reports a refused connection or an untrusted certificate as a raw error
chain (``tcp connect error: Connection refused (os error 111)``, ``invalid peer
certificate: UnknownIssuer``); a person needs the address, what went wrong and which
setting to look at.
"""

from __future__ import annotations

import re

from conveyor_sdk.errors import Code, ConveyorError

__all__ = ["CA_ENV", "describe"]

CA_ENV = "CONVEYOR_CA_FILE"

_URL = re.compile(r"for url \((https?://[^/)\s]+)")
_CERT = re.compile(
    r"invalid peer certificate: ([A-Za-z]+)|(CaUsedAsEndEntity|UnknownIssuer|NotValidForName|Expired)"
    r"|certificate verif\w* failed[^:]*: ([^(]+)"
)
_CAUSES = (
    ("Connection refused", "connection refused: is the server running?"),
    ("dns error", "the host name does not resolve"),
    ("failed to lookup", "the host name does not resolve"),
    ("timed out", "no answer in time"),
    ("Connection reset", "the connection was reset (http:// to a TLS port, or https:// to a plain one?)"),
)


def describe(exc: ConveyorError, address: str | None = None) -> str | None:
    """One line for a network failure reaching ``address`` (None when ``exc`` is not one)."""
    text = exc.message
    found = _URL.search(text)
    where = address or (found.group(1) if found else "the server")
    cert = _CERT.search(text)
    if cert is not None:
        reason = next(g for g in cert.groups() if g).strip()
        return (
            f"the TLS certificate of {where} does not verify ({reason}): pass the CA that signed it with "
            f"--ca-file / {CA_ENV}, or check --server / CONVEYOR_ADDR"
        )
    if exc.code is not Code.UNAVAILABLE:
        return None
    for marker, words in _CAUSES:
        if marker in text:
            return f"cannot reach the server at {where} ({words}); check --server / CONVEYOR_ADDR"
    return None
