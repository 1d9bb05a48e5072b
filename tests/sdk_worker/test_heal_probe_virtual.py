"""The heal probe's logic in virtual time: a Worker on a ManualClock and a MemoryServer, reached
through a link the test breaks and mends (refusing, blackholed, closing at the first byte,
closing at once). The reconnect waits, the probe's spacing and timeout and the keepalive's PINGs
all follow the clock, so waits of 4-8 s pass in milliseconds. The same behaviours over real
loopback sockets and a fault proxy: test_heal_probe.py."""

from __future__ import annotations

import asyncio
import errno
import itertools
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from conveyor_sdk._h2kernel.memory import connect_pair
from conveyor_sdk._transport._connect import Target
from conveyor_sdk._transport.clock import ManualClock
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_sdk.worker import Registry, Worker
from tests.sdk_client.conftest import memory_server
from tests.sdk_worker.test_heal_probe import WORST, _logger

_P = TypeVar("_P", bound=asyncio.BaseProtocol)
Mode = Literal["up", "refused", "blackhole", "eof", "slam"]


class _Sink(asyncio.Protocol):
    """The far end of a broken link: drops every byte ("blackhole"), closes at the first byte
    ("eof": a server whose header timeout passed) or at once ("slam")."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        if self.mode == "slam":
            transport.close()

    def data_received(self, data: bytes) -> None:
        if self.mode == "eof":
            self.transport.close()


class _Link:
    """The path from the worker to ``server``, as a Dialer whose state the test sets."""

    def __init__(self, server: MemoryServer, clock: ManualClock) -> None:
        self.server = server
        self.clock = clock
        self.mode: Mode = "up"
        self.dials: list[float] = []  # the virtual time of every connect, probes included

    async def dial(
        self, factory: Callable[[], _P], target: Target, *, tls: object | None, server_hostname: str | None
    ) -> tuple[asyncio.Transport, _P]:
        self.dials.append(self.clock.now())
        if self.mode == "up":
            return await self.server.dial(factory, target, tls=tls, server_hostname=server_hostname)
        if self.mode == "refused":
            raise ConnectionRefusedError(errno.ECONNREFUSED, "nothing listens (the test's link)")
        protocol = factory()
        client_side, _ = connect_pair(protocol, _Sink(self.mode), name=target.host)
        return client_side, protocol

    def cut(self, mode: Mode) -> None:
        """New connections meet ``mode``; with "blackhole", live ones stop delivering too."""
        self.mode = mode
        if mode == "blackhole":
            for transport in self.server.transports:
                transport.pause_reading()  # nothing the server sends reaches the worker any more


async def _settle() -> None:
    for _ in range(30):  # the turns a step released: a connect, a session's frames, a timer's wake
        await asyncio.sleep(0)


async def _advance_until(
    clock: ManualClock, predicate: Callable[[], object], what: str, *, limit: float = 120.0
) -> float:
    """Move virtual time 0.05 s at a time, letting the loop run what each step released, until
    ``predicate()`` holds; returns the virtual seconds that took."""
    start = clock.now()
    await _settle()
    while not predicate():
        assert clock.now() - start < limit, f"no {what} within {limit}s of virtual time"
        await clock.advance(0.05)
        await _settle()
    return clock.now() - start


def _with_link(script: Callable[[Worker, _Link, ManualClock, Any], Any], mode: Mode, **kwargs: Any) -> None:
    async def main() -> None:
        clock = ManualClock()
        logger, lines = _logger(f"virtual-{mode}")
        async with memory_server() as server:
            link = _Link(server, clock)
            link.mode = mode
            worker = Worker(
                server.url, dialer=link.dial, clock=clock, logger=logger, rng=lambda: WORST, **kwargs
            )
            run = asyncio.create_task(worker.run(Registry()))
            try:
                await script(worker, link, clock, lines)
            finally:
                worker.stop(immediate=True)
                await _advance_until(clock, run.done, "the worker's return", limit=60)
                await run

    asyncio.run(main())


def test_a_refusing_address_is_reconnected_within_2s_of_listening_in_virtual_time() -> None:
    """Default backoff, worst jitter: the wait grows past 4 s while every connect (probes too) is
    refused; once the link listens, the session is back within 2 s of virtual time."""

    async def script(worker: Worker, link: _Link, clock: ManualClock, lines: Any) -> None:
        await _advance_until(clock, lambda: any(w > 4 for w in lines.waits()), "reconnect wait above 4 s")
        assert len(link.dials) > len(lines.waits()), "no probe connected during the long waits"
        link.mode = "up"
        took = await _advance_until(clock, lambda: worker.phase == "open", "session after the heal")
        assert took < 2.0, took
        assert any("answers again" in line for line in lines.lines), lines.lines

    _with_link(script, "refused")


def test_a_blackholed_link_is_reconnected_within_2s_of_the_heal_in_virtual_time() -> None:
    """Connections accepted, nothing comes back: each attempt dies by the keepalive, the wait
    grows, the probe's PING gets no answer until the heal, then the session is back within 2 s."""

    async def script(worker: Worker, link: _Link, clock: ManualClock, lines: Any) -> None:
        await _advance_until(clock, lambda: worker.phase == "open", "the first session")
        link.cut("blackhole")
        await _advance_until(clock, lambda: any(w > 4 for w in lines.waits()), "reconnect wait above 4 s")
        assert any("no answer to an HTTP/2 PING" in line for line in lines.lines), lines.lines
        assert not any("answers again" in line for line in lines.lines), "a probe through the blackhole"
        link.mode = "up"
        took = await _advance_until(clock, lambda: worker.phase == "open", "session after the heal")
        assert took < 2.0, took

    _with_link(script, "up", keepalive_interval=0.3, keepalive_timeout=0.6)


def test_a_streak_begun_by_a_dead_session_is_probed_through_attempts_that_end_by_eof_in_virtual_time() -> (
    None
):
    """The session dies by the keepalive; later attempts end by an EOF (a server closing a
    connection whose preface never came): the streak holds, the grown wait is probed and cut."""

    async def script(worker: Worker, link: _Link, clock: ManualClock, lines: Any) -> None:
        await _advance_until(clock, lambda: worker.phase == "open", "the first session")
        link.cut("blackhole")
        await _advance_until(
            clock, lambda: any("no answer to an HTTP/2 PING" in x for x in lines.lines), "PING"
        )
        link.mode = "eof"
        await _advance_until(clock, lambda: any(w > 4 for w in lines.waits()), "reconnect wait above 4 s")
        assert any("the connection to the server was lost" in line for line in lines.lines), lines.lines
        link.mode = "up"
        took = await _advance_until(clock, lambda: worker.phase == "open", "session after the heal")
        assert took < 2.0, took

    _with_link(script, "up", keepalive_interval=0.5, keepalive_timeout=3.0)


def test_an_address_that_accepts_but_fails_the_session_keeps_the_full_backoff_in_virtual_time() -> None:
    """Every connection closed at once: not a refusal, so no probe connects and each wait is the
    §5.9 draw (worst jitter: 0.5, 1, 2, 4 s), run in full."""

    async def script(worker: Worker, link: _Link, clock: ManualClock, lines: Any) -> None:
        await _advance_until(clock, lambda: len(lines.waits()) >= 4 and len(link.dials) >= 4, "four waits")
        waits = lines.waits()[:4]
        assert [round(w / WORST, 1) for w in waits] == [0.5, 1.0, 2.0, 4.0], waits
        gaps = [b - a for a, b in itertools.pairwise(link.dials)]
        assert gaps[2] >= waits[2], (gaps, waits)  # the 2 s wait ran in full: nothing cut it
        assert len(link.dials) - len(lines.waits()) in (0, 1), "a connection that was not a session attempt"
        assert not any("answers again" in line for line in lines.lines)

    _with_link(script, "slam")
