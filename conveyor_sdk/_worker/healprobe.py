"""Noticing that an unreachable server answers again while a long reconnect wait runs.

§5.9's backoff exists so that workers do not storm a server that is up but failing: each failed
session set-up doubles the wait, up to 30 s. When the failure was that nothing answered at all
(connection refused, host or network unreachable, a connect that timed out, or a link found dead
by the keepalive: a PING unanswered, a write that did not move), there is no server to overload
yet, and a wait of up to 30 s only delays the work once the link is back. So while such a wait is
longer than :data:`MIN_WAIT`, the worker probes each of its addresses every :data:`INTERVAL`
seconds (jittered, so a fleet spreads out): a fresh connection, the HTTP/2 preface and one PING,
closed once the PING is acknowledged. The server's HTTP/2 layer answers that without any session
work, and only a working path in both directions carries the answer (a partition that still
accepts TCP, as a proxy or a load balancer in front of a cut link does, is not mistaken for a
heal). The first address that answers cuts the wait short and the next session attempt goes there.

The streak of unanswered failures ends with a Welcome, and also when an attempt that a probe
started fails any other way (the server answered the probe but not the session): from then on the
plain backoff applies, so a server that is up but failing sessions is never retried at the probe's
pace. An attempt that a heal interrupts (the link resets) keeps the streak.
"""

from __future__ import annotations

import asyncio
import errno
import ssl
from collections.abc import Callable, Sequence

from conveyor_sdk._transport._connect import Dialer, Target, dial_tcp, parse_target, tls_context
from conveyor_sdk._transport.clock import Clock, SystemClock
from conveyor_sdk._transport.options import TLSOptions
from conveyor_sdk.errors import ConveyorError, InvalidArgument

__all__ = ["INTERVAL", "MIN_WAIT", "HealProbe", "refused", "unanswered"]

INTERVAL = 0.6  # mean probe spacing; the draw is uniform in [0.5, 1.5) x this: 0.3 to 0.9 s
MIN_WAIT = 1.0  # a shorter reconnect wait ends before a probe could gain anything
PROBE_TIMEOUT = 2.0  # connect + TLS + PING answer; a server slower than that is not cut short
_OPAQUE = b"cnvprobe"
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # empty SETTINGS, stream 0
_PING = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + _OPAQUE
_PING_TYPE, _GOAWAY_TYPE, _ACK = 6, 7, 1
_MAX_READ = 1 << 16  # frames read before the PING's answer: a server says little before it
_NOT_LISTENING = frozenset(
    getattr(errno, name)
    for name in ("ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH", "EHOSTDOWN", "ENETDOWN")
    if hasattr(errno, name)
)


def refused(error: ConveyorError) -> bool:
    """Whether ``error`` says nothing listened at the address (the TCP connect itself failed)."""
    return error.details.get("connect_errno") in _NOT_LISTENING


def unanswered(error: ConveyorError | None) -> bool:
    """Whether nothing answered at all: refused/unreachable, a connect timeout, or a dead link."""
    if error is None:
        return False
    details = error.details
    return refused(error) or bool(details.get("connect_timeout") or details.get("link_dead"))


class HealProbe:
    """One probing run: connects to ``addresses`` until one answers or :meth:`cancel`.

    ``on_accept(index)`` is called once, with the index of the first address that answered.
    ``rng`` draws in [0, 1) for the jitter (injected, like the backoff's). ``tls``: the session's
    TLS options (``https://`` addresses are probed over TLS with ALPN ``h2``). ``dialer``: how
    a probe connects (the session's: TCP, or in tests an in-memory server). ``clock``: whose
    time the waits between probes follow (the worker's; a test's virtual clock moves them).
    """

    def __init__(
        self,
        addresses: Sequence[str],
        on_accept: Callable[[int], None],
        rng: Callable[[], float],
        *,
        tls: TLSOptions | None = None,
        interval: float = INTERVAL,
        dialer: Dialer = dial_tcp,
        clock: Clock | None = None,
    ) -> None:
        self._tls = tls
        self._addresses = tuple(addresses)
        self._on_accept = on_accept
        self._rng = rng
        self._interval = interval
        self._dialer = dialer
        self._clock = clock or SystemClock()
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="conveyor-heal-probe")

    def cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def _run(self) -> None:
        targets: list[tuple[Target, ssl.SSLContext | None] | None] = []
        for address in self._addresses:
            try:
                target = parse_target(address)
                ctx = tls_context(self._tls) if target.scheme == "https" else None
            except InvalidArgument:  # the session attempt itself reports a bad address or TLS file
                targets.append(None)
            else:
                targets.append((target, ctx))
        while True:
            await self._clock.sleep(self._interval * (0.5 + self._rng()))
            answers = await asyncio.gather(*(self._answers(t) for t in targets))
            for index, answered in enumerate(answers):
                if answered:
                    self._on_accept(index)
                    return

    async def _answers(self, probe: tuple[Target, ssl.SSLContext | None] | None) -> bool:
        if probe is None:
            return False
        attempt = asyncio.ensure_future(self._ping(*probe))

        def expire() -> None:
            attempt.cancel()

        timer = self._clock.call_later(PROBE_TIMEOUT, expire)
        try:
            return await attempt
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # the probe itself is cancelled
                raise
            return False  # PROBE_TIMEOUT passed (on the clock, like the waits) with no answer
        finally:
            timer.cancel()

    async def _ping(self, target: Target, ctx: ssl.SSLContext | None) -> bool:
        """Connect, send the preface and a PING, and tell whether its ACK came back."""
        hostname = ((self._tls.server_hostname if self._tls else None) or target.host) if ctx else None
        transport: asyncio.Transport | None = None
        try:
            transport, watch = await self._dialer(_PingWatch, target, tls=ctx, server_hostname=hostname)
            ssl_object = transport.get_extra_info("ssl_object")
            if ctx is not None and (ssl_object is None or ssl_object.selected_alpn_protocol() != "h2"):
                return False
            transport.write(_PREFACE + _SETTINGS + _PING)
            return await watch.answer
        except (OSError, ssl.SSLError, ConveyorError):
            return False
        finally:
            if transport is not None:
                transport.close()  # the server sees a connection that ends after its PING's answer


class _PingWatch(asyncio.Protocol):
    """Reads frames until our PING's ACK (True) or a GOAWAY, the end, or too many bytes (False)."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._buffer = bytearray()
        self._seen = 0

    def data_received(self, data: bytes) -> None:
        if self.answer.done():
            return
        buffer = self._buffer
        buffer += data
        while len(buffer) >= 9:
            length = int.from_bytes(buffer[:3], "big")
            if len(buffer) < 9 + length:
                break
            kind, flags, body = buffer[3], buffer[4], bytes(buffer[9 : 9 + length])
            del buffer[: 9 + length]
            self._seen += 9 + length
            if kind == _PING_TYPE and flags & _ACK and body == _OPAQUE:
                self._settle(True)
                return
            if kind == _GOAWAY_TYPE:
                self._settle(False)
                return
        if self._seen + len(buffer) >= _MAX_READ:  # a server says little before the answer
            self._settle(False)

    def eof_received(self) -> bool | None:
        self._settle(False)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._settle(False)

    def _settle(self, answered: bool) -> None:
        if not self.answer.done():
            self.answer.set_result(answered)
