"""The one I/O boundary of the clients: connectrpc/pyqwest setup, error translation, retries.

Defaults: Connect protocol, binary proto, no request compression, HTTP/2 with
prior knowledge for ``http://`` (h2c) and TLS + ALPN for ``https://``.
Every exception raised below connectrpc (``ConnectError``, pyqwest, OS) is
turned into a :class:`~conveyor_sdk.errors.ConveyorError` by :func:`translate`
and nowhere else.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pyqwest
from connectrpc.compat import google_protobuf_binary_codec, google_protobuf_json_codec
from connectrpc.errors import ConnectError
from connectrpc.protocol import ProtocolType

from conveyor_sdk._client.retry import NO_RETRY, RetryConfig, can_fail_over, safe_to_repeat, should_retry
from conveyor_sdk._protocol.backoff import parse_addresses
from conveyor_sdk.errors import Code, ConveyorError, DeadlineExceeded, Unavailable, error_for_code

__all__ = ["ClientConfig", "Ring", "Routed", "translate"]

log = logging.getLogger("conveyor.client")

RES = TypeVar("RES")
Protocol = Literal["connect", "grpc"]
WireFormat = Literal["proto", "json"]


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Validated connection settings shared by the async and sync clients."""

    address: str  # the first of ``addresses``
    token: str | None = None
    protocol: Protocol = "connect"
    wire_format: WireFormat = "proto"
    timeout: float | None = 30.0
    retry: RetryConfig = field(default_factory=RetryConfig)
    headers: Mapping[str, str] = field(default_factory=dict)
    tls_ca_cert: bytes | None = None
    http2: bool = True
    addresses: tuple[str, ...] = ()  # every server to fail over between (default: ``address``)

    def __post_init__(self) -> None:
        addresses = parse_addresses(self.addresses or self.address)
        object.__setattr__(self, "addresses", addresses)
        object.__setattr__(self, "address", addresses[0])
        if self.protocol not in ("connect", "grpc"):
            raise ValueError(f"protocol must be 'connect' or 'grpc', got {self.protocol!r}")
        if self.wire_format not in ("proto", "json"):
            raise ValueError(f"wire_format must be 'proto' or 'json', got {self.wire_format!r}")
        if self.protocol == "grpc" and not self.http2:
            raise ValueError("the gRPC protocol needs HTTP/2")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"timeout must be positive seconds or None, got {self.timeout!r}")

    @property
    def tls(self) -> bool:
        """True for https:// addresses (all of them: see ``__post_init__``)."""
        return self.address.startswith("https://")

    def request_headers(self) -> dict[str, str]:
        """Static headers for every call (bearer token + user headers)."""
        headers = dict(self.headers)
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    def transport_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for pyqwest's (Sync)HTTPTransport."""
        kwargs: dict[str, Any] = {}
        if self.tls:
            if self.tls_ca_cert is not None:
                kwargs["tls_ca_cert"] = self.tls_ca_cert
            else:
                kwargs["tls_include_system_certs"] = True
            if not self.http2:
                kwargs["http_version"] = pyqwest.HTTPVersion.HTTP1
        elif self.http2:
            kwargs["http_version"] = pyqwest.HTTPVersion.HTTP2  # h2c with prior knowledge
        return kwargs

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the generated connectrpc service clients."""
        codec = google_protobuf_json_codec() if self.wire_format == "json" else google_protobuf_binary_codec()
        protocol = ProtocolType.GRPC if self.protocol == "grpc" else ProtocolType.CONNECT
        return {"codec": codec, "protocol": protocol, "send_compression": None}

    def timeout_ms(self, override: float | None) -> int | None:
        """Per-call timeout in ms (``override`` seconds wins over the client default)."""
        seconds = self.timeout if override is None else override
        return None if seconds is None else max(1, int(seconds * 1000))


def translate(exc: BaseException) -> ConveyorError:
    """Map any transport-level exception onto the SDK error tree."""
    if isinstance(exc, ConveyorError):
        return exc
    if isinstance(exc, ConnectError):
        if isinstance(exc.__cause__, ConveyorError):  # raised by our own transport, wrapped by connectrpc
            return exc.__cause__
        code = Code.from_connect(exc.code.value)
        details = {"connect_code": exc.code.value}
        return error_for_code(code, exc.message or str(exc), details=details)
    if isinstance(exc, TimeoutError):
        return DeadlineExceeded(str(exc) or "request timed out")
    if isinstance(exc, OSError):
        return Unavailable(f"{type(exc).__name__}: {exc}")
    return Unavailable(f"transport failure: {type(exc).__name__}: {exc}")


def _with_attempts(err: ConveyorError, attempt: int, unsent: int = 0) -> ConveyorError:
    """Record how many attempts the call took (``details["attempts"]``) when it was retried,
    and how many of them may have reached a server (``details["sent_attempts"]``: attempts
    whose connection could not even be opened are not counted)."""
    if attempt > 1:
        err.details = {**err.details, "attempts": attempt, "sent_attempts": attempt - unsent}
    return err


def _cancelled(exc: BaseException) -> bool:
    """connectrpc turns task cancellation into ConnectError(CANCELED); undo that."""
    return isinstance(exc, ConnectError) and isinstance(exc.__cause__, asyncio.CancelledError)


class Ring:
    """Which of several server addresses calls go to: the current one until a call fails there.

    Shared by every call of one client. :meth:`moved_from` moves on only if no other call has
    already moved away from the failed address, so two calls failing at once skip no node.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.index = 0

    def moved_from(self, index: int) -> None:
        if self.index == index:
            self.index = (index + 1) % self.size


class Routed:
    """One RPC method of several stubs (one per address): called on the ring's current address.

    ``UnaryCaller`` picks ``methods[ring.index]`` per attempt, so a retry goes elsewhere."""

    __slots__ = ("keeps_deadline", "methods", "ring")

    def __init__(self, ring: Ring, methods: Sequence[Callable[..., Any]]) -> None:
        self.ring = ring
        self.methods = tuple(methods)
        self.keeps_deadline = getattr(methods[0], "keeps_deadline", False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.methods[self.ring.index](*args, **kwargs)


class RoutedStub:
    """Stubs of one service, one per address, seen as one: each method is :class:`Routed`."""

    def __init__(self, ring: Ring, stubs: Sequence[Any]) -> None:
        self._ring = ring
        self._stubs = tuple(stubs)

    def __getattr__(self, name: str) -> Routed:
        routed = Routed(self._ring, [getattr(stub, name) for stub in self._stubs])
        setattr(self, name, routed)  # built once per method
        return routed


def _target(fn: Callable[..., RES]) -> tuple[Callable[..., RES], int]:
    """The method to call for this attempt, and the address index it goes to (-1: only one)."""
    if isinstance(fn, Routed):
        index = fn.ring.index
        return fn.methods[index], index
    return fn, -1


class UnaryCaller:
    """Run unary calls with headers, timeout, translation, failover and bounded retries.

    With several addresses, a failure that :func:`~conveyor_sdk._client.retry.can_fail_over`
    allows is repeated on the next address at once; ``retry``'s budget and delays count whole
    rounds of addresses (one address: every attempt is a round, as before).
    """

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.headers = config.request_headers()
        self._timed: dict[int, dict[str, str]] = {}  # self.headers + connect-timeout-ms, per timeout
        self.ring = Ring(len(config.addresses))
        self.calls = 0
        self.retries = 0
        self.failovers = 0

    def _next(self, err: ConveyorError, safe: bool, index: int, hops: int) -> bool:
        """After a failed attempt on address ``index``: True to try the next address at once."""
        if index < 0:
            return False
        self.ring.moved_from(index)
        if hops + 1 < self.ring.size and can_fail_over(err, safe):
            self.failovers += 1
            log.info("call failed on %s (%s); trying %s", self.config.addresses[index], err,
                     self.config.addresses[self.ring.index])  # fmt: skip
            return True
        return False

    async def acall(
        self,
        method: str,
        fn: Callable[..., Awaitable[RES]],
        request: object,
        timeout: float | None = None,  # noqa: ASYNC109  # forwarded to connectrpc as timeout_ms
        sent: list[int] | None = None,
    ) -> RES:
        """Async call of a generated client method ``fn`` (e.g. ``tasks.enqueue``).

        ``sent``, when given, gets the number of attempts that may have reached a server
        appended on success (more than 1: the request was repeated; see ``repeat``)."""
        safe = safe_to_repeat(method, request)
        plan = self.config.retry if safe else NO_RETRY
        timeout_ms = self.config.timeout_ms(timeout)
        attempt = rounds = hops = unsent = 0
        while True:
            attempt += 1
            self.calls += 1
            target, index = _target(fn)
            try:
                if getattr(target, "keeps_deadline", False):  # our own stubs: no wrapper around the call
                    result = await target(request, headers=self.headers, timeout_ms=timeout_ms)
                else:
                    result = await self._attempt(target, request, timeout_ms)
                if sent is not None:
                    sent.append(attempt - unsent)
                return result
            except Exception as exc:
                if _cancelled(exc):
                    raise asyncio.CancelledError() from exc
                err = _with_attempts(translate(exc), attempt, unsent)
                unsent += bool(err.details.get("not_sent"))
                if self._next(err, safe, index, hops):
                    hops += 1
                    continue
                rounds, hops = rounds + 1, 0
                if not should_retry(err, rounds, plan):
                    raise err from exc
            self.retries += 1
            delay = plan.delay(rounds - 1)
            log.debug("%s unavailable (attempt %d); retrying in %.3fs", method, attempt, delay)
            await asyncio.sleep(delay)

    async def _attempt(
        self, fn: Callable[..., Awaitable[RES]], request: object, timeout_ms: int | None
    ) -> RES:
        """One call. Over Connect the deadline is kept here, with ``asyncio.timeout``, and sent as
        ``connect-timeout-ms``: connectrpc's own ``wait_for`` would run the request in a new task,
        one event-loop turn (about 50-70 us on an idle loop) before its bytes are written. A method
        that keeps its deadline itself (``keeps_deadline``: see ``connect_unary``) gets it as is."""
        if timeout_ms is None or self.config.protocol != "connect" or getattr(fn, "keeps_deadline", False):
            return await fn(request, headers=self.headers, timeout_ms=timeout_ms)
        headers = self._timed.get(timeout_ms)
        if headers is None:  # connectrpc copies what it is given, so one dict serves every call
            if len(self._timed) >= 16:
                self._timed.clear()
            headers = self._timed[timeout_ms] = {**self.headers, "connect-timeout-ms": str(timeout_ms)}
        deadline = asyncio.timeout(timeout_ms / 1000)
        try:
            async with deadline:
                return await fn(request, headers=headers, timeout_ms=None)
        except Exception:
            if deadline.expired():  # whatever connectrpc made of the cancellation
                raise DeadlineExceeded(f"call exceeded its {timeout_ms / 1000:g}s deadline") from None
            raise

    def call(
        self,
        method: str,
        fn: Callable[..., RES],
        request: object,
        timeout: float | None = None,
        sent: list[int] | None = None,
    ) -> RES:
        """Blocking call of a generated sync client method (``sent``: as for :meth:`acall`)."""
        safe = safe_to_repeat(method, request)
        plan = self.config.retry if safe else NO_RETRY
        timeout_ms = self.config.timeout_ms(timeout)
        attempt = rounds = hops = unsent = 0
        while True:
            attempt += 1
            self.calls += 1
            target, index = _target(fn)
            try:
                result = target(request, headers=self.headers, timeout_ms=timeout_ms)
                if sent is not None:
                    sent.append(attempt - unsent)
                return result
            except Exception as exc:
                err = _with_attempts(translate(exc), attempt, unsent)
                unsent += bool(err.details.get("not_sent"))
                if self._next(err, safe, index, hops):
                    hops += 1
                    continue
                rounds, hops = rounds + 1, 0
                if not should_retry(err, rounds, plan):
                    raise err from exc
            self.retries += 1
            delay = plan.delay(rounds - 1)
            log.debug("%s unavailable (attempt %d); retrying in %.3fs", method, attempt, delay)
            time.sleep(delay)
