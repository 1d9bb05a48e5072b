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
import contextlib
import errno
import ssl
from collections.abc import Callable, Sequence

from conveyor_sdk._transport._connect import Target, parse_target, tls_context
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
    """One probing run: TCP connects to ``addresses`` until one accepts or :meth:`cancel`.

    ``on_accept(index)`` is called once, with the index of the first address that answered.
    ``rng`` draws in [0, 1) for the jitter (injected, like the backoff's). ``tls``: the session's
    TLS options (``https://`` addresses are probed over TLS with ALPN ``h2``).
    """

    def __init__(
        self,
        addresses: Sequence[str],
        on_accept: Callable[[int], None],
        rng: Callable[[], float],
        *,
        tls: TLSOptions | None = None,
        interval: float = INTERVAL,
    ) -> None:
        self._tls = tls
        self._addresses = tuple(addresses)
        self._on_accept = on_accept
        self._rng = rng
        self._interval = interval
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
            await asyncio.sleep(self._interval * (0.5 + self._rng()))
            answers = await asyncio.gather(*(self._answers(t) for t in targets))
            for index, answered in enumerate(answers):
                if answered:
                    self._on_accept(index)
                    return

    async def _answers(self, probe: tuple[Target, ssl.SSLContext | None] | None) -> bool:
        if probe is None:
            return False
        target, ctx = probe
        hostname = ((self._tls.server_hostname if self._tls else None) or target.host) if ctx else None
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                reader, writer = await asyncio.open_connection(
                    target.host, target.port, ssl=ctx, server_hostname=hostname
                )
                if ctx is not None and writer.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
                    return False
                writer.write(_PREFACE + _SETTINGS + _PING)
                return await _ping_answered(reader)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ssl.SSLError):
            return False
        finally:
            if writer is not None:
                writer.close()  # the server sees a connection that ends after its PING's answer
                with contextlib.suppress(OSError, ssl.SSLError):
                    await writer.wait_closed()


async def _ping_answered(reader: asyncio.StreamReader) -> bool:
    """Read frames until our PING's ACK (True) or a GOAWAY / too many bytes (False)."""
    seen = 0
    while seen < _MAX_READ:
        head = await reader.readexactly(9)
        length = int.from_bytes(head[:3], "big")
        body = await reader.readexactly(length)
        seen += 9 + length
        if head[3] == _PING_TYPE and head[4] & _ACK and body == _OPAQUE:
            return True
        if head[3] == _GOAWAY_TYPE:
            return False
    return False
