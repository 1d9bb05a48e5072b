"""Hand-rolled HTTP/2 transport for the worker session stream (gRPC or Connect streaming).

Layers: :mod:`.core` is sans-I/O (h2 state + framing: bytes in, state out);
:mod:`.session` is the thin asyncio shell; :mod:`._connect` sets up sockets and TLS.
"""

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
