"""Hand-rolled HTTP/2 transport for the worker session stream (gRPC or Connect streaming).

Layers: :mod:`.core` is sans-I/O (h2 state + framing: bytes in, state out);
:mod:`.session` is the thin asyncio shell; :mod:`._connect` sets up sockets and TLS.

The names below load on first use: the reference server imports this package's
event-loop choice (:mod:`.eventloop`) and must not load the worker's session stream
with it (CONTRIBUTING.md, "Layers").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conveyor_sdk._transport.core import SessionCore
    from conveyor_sdk._transport.options import DEFAULT_USER_AGENT, TLSOptions, TransportOptions
    from conveyor_sdk._transport.session import DEFAULT_PATH, SessionStream, open_session

__all__ = [
    "DEFAULT_PATH",
    "DEFAULT_USER_AGENT",
    "SessionCore",
    "SessionStream",
    "TLSOptions",
    "TransportOptions",
    "open_session",
]

_HOMES = {
    "SessionCore": "core",
    "DEFAULT_USER_AGENT": "options",
    "TLSOptions": "options",
    "TransportOptions": "options",
    "DEFAULT_PATH": "session",
    "SessionStream": "session",
    "open_session": "session",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
