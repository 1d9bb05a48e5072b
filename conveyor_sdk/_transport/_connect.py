"""Connection set-up helpers: URL parsing, request headers, TLS contexts, socket errors.

Foreign exceptions raised while connecting (OS, ssl, timeouts) are translated
here and only here.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from hpack import NeverIndexedHeaderTuple

from conveyor_sdk._transport._status import CONTENT_TYPES
from conveyor_sdk._transport.keepalive import KeepaliveOptions
from conveyor_sdk._transport.options import TLSOptions, TransportOptions
from conveyor_sdk.errors import ConveyorError, InvalidArgument, Unavailable

__all__ = [
    "Dialer",
    "Target",
    "check_alpn",
    "connect_error",
    "dial_tcp",
    "parse_target",
    "request_headers",
    "tcp_keepalive",
    "tls_context",
    "tune_socket",
]


@dataclass(frozen=True, slots=True)
class Target:
    """Where to connect: scheme, host, port and the ``:authority`` value."""

    scheme: str
    host: str
    port: int

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_target(url: str) -> Target:
    """Parse ``http://host:port`` (h2c) or ``https://host:port`` (TLS)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidArgument(f"invalid server URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidArgument(f"server URL {url!r} must start with http:// (h2c) or https:// (TLS)")
    if not parts.hostname:
        raise InvalidArgument(f"server URL {url!r} has no host")
    default = 443 if parts.scheme == "https" else 80
    return Target(parts.scheme, parts.hostname, port or default)


_P = TypeVar("_P", bound=asyncio.BaseProtocol)


class Dialer(Protocol):
    """How a connection is opened: :func:`dial_tcp` (the default) or, in tests, an in-memory pair
    joined to an in-process server (``conveyor_sdk.testing.memory``). Returns the transport and
    the protocol ``factory`` built, once the protocol has seen ``connection_made``; failures are
    raised as the OS or ssl raise them (:func:`connect_error` translates them)."""

    async def __call__(
        self,
        factory: Callable[[], _P],
        target: Target,
        *,
        tls: ssl.SSLContext | None,
        server_hostname: str | None,
    ) -> tuple[asyncio.Transport, _P]: ...


async def dial_tcp(
    factory: Callable[[], _P],
    target: Target,
    *,
    tls: ssl.SSLContext | None,
    server_hostname: str | None,
) -> tuple[asyncio.Transport, _P]:
    """Open a TCP (or TLS) connection to ``target`` on the running loop."""
    loop = asyncio.get_running_loop()
    return await loop.create_connection(
        factory, target.host, target.port, ssl=tls, server_hostname=server_hostname
    )


def request_headers(target: Target, path: str, options: TransportOptions) -> list[tuple[str, str]]:
    """HTTP/2 request headers for the session stream."""
    if options.protocol not in CONTENT_TYPES:
        raise InvalidArgument(f"unknown protocol {options.protocol!r}; use 'grpc' or 'connect'")
    headers = [
        (":method", "POST"),
        (":scheme", target.scheme),
        (":path", path),
        (":authority", target.authority),
        ("content-type", CONTENT_TYPES[options.protocol]),
        ("user-agent", options.user_agent),
    ]
    if options.protocol == "grpc":
        headers += [("te", "trailers"), ("grpc-accept-encoding", "identity")]
    if options.token:  # never HPACK-indexed: keeps the secret out of compression tables
        secret = NeverIndexedHeaderTuple("authorization", f"Bearer {options.token}")
        headers.append(cast("tuple[str, str]", secret))  # a tuple subclass h2 honours
    for name, value in options.extra_headers:
        headers.append((name.lower(), value))
    return headers


def tls_context(tls: TLSOptions | None, *, ca_data: bytes | None = None) -> ssl.SSLContext:
    """A verifying client context offering only ALPN ``h2``.

    ``ca_data``: a PEM CA bundle in memory (the producer client's ``tls_ca_cert``), trusted
    instead of the system store, like ``tls.ca_file``.
    """
    tls = tls or TLSOptions()
    try:
        ctx = ssl.create_default_context(
            cafile=tls.ca_file, cadata=ca_data.decode("ascii") if ca_data is not None else None
        )
        if tls.cert_file:
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"cannot load TLS files: {exc}") from None
    ctx.set_alpn_protocols(["h2"])
    return ctx


def connect_error(exc: BaseException, target: Target) -> ConveyorError:
    """Translate an exception raised while connecting to ``target``."""
    where = f"{target.host}:{target.port}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = exc.verify_message or str(exc)
        return Unavailable(f"TLS certificate verification failed for {where}: {reason}", retryable=False)
    if isinstance(exc, ssl.SSLError):
        return Unavailable(f"TLS handshake with {where} failed: {exc.reason or exc}")
    if isinstance(exc, TimeoutError):
        return Unavailable(f"timed out connecting to {where}", details={"connect_timeout": True})
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc) or type(exc).__name__
        code = _errno(exc)  # the worker's heal probe runs only when nothing listened (healprobe.py)
        details = {"connect_errno": code} if code else None
        return Unavailable(f"cannot connect to {where}: {reason}", details=details)
    return Unavailable(f"cannot connect to {where}: {exc!r}")


def _errno(exc: OSError) -> int | None:
    """The errno of a failed connect; asyncio joins the failures of several resolved addresses
    (``localhost``: ``::1`` and ``127.0.0.1``) into one OSError without one, so take theirs when
    they all agree."""
    if exc.errno is not None:
        return int(exc.errno)
    codes = set(re.findall(r"\[Errno (\d+)\]", str(exc)))
    return int(codes.pop()) if len(codes) == 1 else None


def check_alpn(transport: Any, target: Target) -> None:
    """Close ``transport`` (an asyncio transport) and raise Unavailable unless TLS negotiated ``h2``."""
    ssl_obj = transport.get_extra_info("ssl_object")
    if ssl_obj is None:
        return
    alpn = ssl_obj.selected_alpn_protocol()
    if alpn != "h2":
        transport.close()
        why = OSError(f"the server did not negotiate HTTP/2 via ALPN (got {alpn!r})")
        raise connect_error(why, target)


def tcp_keepalive(keepalive: KeepaliveOptions | None) -> dict[str, int]:
    """Kernel settings for a long-lived connection: the second line of defence behind the PING.

    ``TCP_KEEPIDLE`` (interval + timeout, 15 s by default), then ``TCP_KEEPCNT`` 3 probes
    ``TCP_KEEPINTVL`` (interval, 5 s) apart: a peer silent while we have nothing to send is
    dropped about 30 s after its last byte. ``TCP_USER_TIMEOUT`` (Linux; 2 x (interval +
    timeout), 30 s): data unacknowledged that long ends the connection. Both are looser than
    the PING's own bound, so the PING, whose error says what happened, normally fires first;
    they still hold when the event loop is too busy to run the PING's timer.
    """
    ka = keepalive or KeepaliveOptions()
    idle = max(1, round(ka.interval + ka.timeout))
    return {
        "idle": idle,
        "interval": max(1, round(ka.interval)),
        "count": 3,
        "user_timeout_ms": 2 * idle * 1000,
    }


def tune_socket(transport: Any, keepalive: KeepaliveOptions | None) -> None:
    """Turn on TCP keepalive (and ``TCP_USER_TIMEOUT`` where the platform has it) on ``transport``'s
    socket, with :func:`tcp_keepalive`'s values; options a platform lacks are skipped."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    values = tcp_keepalive(keepalive)
    idle = getattr(socket, "TCP_KEEPIDLE", getattr(socket, "TCP_KEEPALIVE", None))  # macOS: TCP_KEEPALIVE
    options = [
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        (socket.IPPROTO_TCP, idle, values["idle"]),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), values["interval"]),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), values["count"]),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_USER_TIMEOUT", None), values["user_timeout_ms"]),
    ]
    for level, name, value in options:
        if name is None:
            continue
        with contextlib.suppress(OSError):  # e.g. a platform that refuses one of them
            sock.setsockopt(level, name, value)
