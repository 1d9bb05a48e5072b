"""Options for opening a worker session stream (value types, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from conveyor_sdk._transport.keepalive import KeepaliveOptions
from conveyor_sdk._version import __version__

__all__ = ["DEFAULT_USER_AGENT", "Protocol", "TLSOptions", "TransportOptions"]

Protocol = Literal["grpc", "connect"]
DEFAULT_USER_AGENT = f"conveyor-py/{__version__}"


@dataclass(frozen=True, slots=True)
class TLSOptions:
    """TLS settings for ``https://`` URLs. Certificates are always verified.

    Attributes:
        ca_file: PEM bundle of trusted CAs; None uses the system trust store.
        cert_file: client certificate (PEM) for mutual TLS.
        key_file: private key for ``cert_file``; None when the key is inside ``cert_file``.
        server_hostname: name to verify the server certificate against (and send as SNI)
            instead of the URL's host.
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_hostname: str | None = None


@dataclass(frozen=True, slots=True)
class TransportOptions:
    """How to reach the server.

    Attributes:
        token: bearer token sent as ``authorization: Bearer <token>``.
        protocol: ``"grpc"`` (default) or ``"connect"`` (Connect streaming, binary proto).
        tls: TLS settings for ``https://`` URLs (None = system trust store).
        connect_timeout: seconds allowed for TCP connect plus TLS handshake.
        max_message: largest message accepted in either direction, in bytes.
        user_agent: the ``user-agent`` header.
        extra_headers: additional request headers (names are lower-cased).
        keepalive: HTTP/2 PING period and timeout, which also bounds a write that cannot
            drain (see :mod:`conveyor_sdk._transport.keepalive`); None turns both checks off
            (TCP keepalive stays on).
    """

    token: str | None = None
    protocol: Protocol = "grpc"
    tls: TLSOptions | None = None
    connect_timeout: float = 10.0
    max_message: int = 64 * 1024 * 1024
    user_agent: str = DEFAULT_USER_AGENT
    extra_headers: tuple[tuple[str, str], ...] = ()
    keepalive: KeepaliveOptions | None = field(default_factory=KeepaliveOptions)
