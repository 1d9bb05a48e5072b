"""The heal probe: a long reconnect wait after refused connects ends once the address listens again,
and an address that accepts but fails the session keeps the full §5.9 backoff (no storm).

These run over real loopback sockets, a fault proxy and server processes, in real time; the same
behaviours in virtual time, over an in-memory server: test_heal_probe_virtual.py."""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import shutil
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conveyor_sdk._protocol.backoff import Backoff
from conveyor_sdk._transport._connect import Target, connect_error, dial_tcp
from conveyor_sdk._transport.options import TLSOptions
from conveyor_sdk._worker.healprobe import HealProbe, refused, unanswered
from conveyor_sdk.testing import FaultProxy
from conveyor_sdk.worker import Registry, Worker
from conveyor_server_min.testing import ServerProcess
from tests._util import until
from tests.sdk_transport._helpers import make_certs

WORST = 0.99  # the jitter draw: every reconnect wait near its ceiling


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def waits(self) -> list[float]:
        return [float(m.group(1)) for line in self.lines if (m := re.search(r" in ([\d.]+)s \(", line))]


def _logger(name: str) -> tuple[logging.Logger, _Lines]:
    lines = _Lines()
    logger = logging.getLogger(f"tests.heal.{name}")
    logger.propagate = False
    logger.handlers[:] = [lines]
    logger.setLevel(logging.DEBUG)
    return logger, lines


def test_only_a_connect_that_found_nothing_listening_counts_as_refused() -> None:
    where = Target("http", "127.0.0.1", 9)
    assert refused(connect_error(ConnectionRefusedError(111, "Connect call failed"), where))
    several = OSError(
        "Multiple exceptions: [Errno 111] Connect call failed ('::1', 9, 0, 0), "
        "[Errno 111] Connect call failed ('127.0.0.1', 9)"
    )  # what asyncio raises for "localhost" (two addresses, both refused): no errno of its own
    assert refused(connect_error(several, where))
    assert not refused(connect_error(TimeoutError(), where))
    assert unanswered(connect_error(TimeoutError(), where))  # no SYN-ACK: a partition, probed too
    handshake = ssl.SSLError(1, "handshake failure")
    handshake.reason = "SSLV3_ALERT_HANDSHAKE_FAILURE"
    assert not refused(connect_error(handshake, where))  # a server answered
    assert not refused(connect_error(OSError("the server did not negotiate HTTP/2 via ALPN"), where))


def test_point_at_starts_the_next_round_at_the_given_address() -> None:
    b = Backoff(rng=lambda: WORST, addresses=("a", "b", "c"))
    b.next_delay(), b.next_delay(), b.next_delay()  # a full round failed: back at "a"
    b.point_at(2)
    assert b.address == "c"
    assert [b.next_delay(), b.address, b.next_delay(), b.address] == [0.0, "a", 0.0, "b"]


def test_a_refusing_address_is_reconnected_within_2s_of_listening(server_url: str) -> None:
    """Default backoff, worst jitter: the wait has grown past 4 s; the session is back within 2 s."""
    asyncio.run(_refusing_then_listening(server_url))


async def _refusing_then_listening(server_url: str) -> None:
    logger, lines = _logger("refused")
    async with FaultProxy(server_url.removeprefix("http://")) as proxy:
        proxy.refuse()
        worker = Worker(proxy.url, logger=logger, rng=lambda: WORST)
        run = asyncio.create_task(worker.run(Registry()))
        try:
            await until(lambda: any(w > 4 for w in lines.waits()), 20, what="a reconnect wait above 4 s")
            await proxy.heal()
            healed = time.monotonic()
            await until(lambda: worker.phase == "open", 5, what="the session after the heal")
            assert time.monotonic() - healed < 2.0
            assert any("answers again" in line for line in lines.lines), lines.lines
        finally:
            worker.stop()
            await run


def test_a_blackholed_link_is_reconnected_within_2s_of_the_heal(server_url: str) -> None:
    """A proxy that accepts TCP but drops every byte (a cut link behind a load balancer): each attempt
    dies by the keepalive, the backoff grows, the probe's PING gets no answer until the heal, then
    the session is back within 2 s."""
    asyncio.run(_blackholed_then_healed(server_url))


async def _blackholed_then_healed(server_url: str) -> None:
    logger, lines = _logger("blackhole")
    async with FaultProxy(server_url.removeprefix("http://")) as proxy:
        options = {"keepalive_interval": 0.3, "keepalive_timeout": 0.6}
        worker = Worker(proxy.url, logger=logger, rng=lambda: WORST, **options)  # type: ignore[arg-type]
        run = asyncio.create_task(worker.run(Registry()))
        try:
            await until(lambda: worker.phase == "open", 10, what="the first session")
            proxy.blackhole()
            await until(lambda: any(w > 4 for w in lines.waits()), 30, what="a reconnect wait above 4 s")
            assert not any("answers again" in line for line in lines.lines), "a probe through the blackhole"
            await proxy.heal()
            healed = time.monotonic()
            await until(lambda: worker.phase == "open", 5, what="the session after the heal")
            assert time.monotonic() - healed < 2.0
        finally:
            worker.stop()
            await run


def test_a_streak_begun_by_a_dead_session_is_probed_through_attempts_the_server_closes(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """The established session dies by the keepalive; later attempts through the cut link end by an
    EOF (the server closes a connection whose preface never came, after --header-timeout): the
    streak of unanswered failures still holds, so the grown wait is probed and cut at the heal."""
    server = server_factory(["--header-timeout", "0.5s"])
    asyncio.run(_dead_session_then_eofs(server.url))


async def _dead_session_then_eofs(server_url: str) -> None:
    logger, lines = _logger("eofs")
    async with FaultProxy(server_url.removeprefix("http://")) as proxy:
        options = {"keepalive_interval": 0.5, "keepalive_timeout": 3.0}  # attempts end by EOF first
        worker = Worker(proxy.url, logger=logger, rng=lambda: WORST, **options)  # type: ignore[arg-type]
        run = asyncio.create_task(worker.run(Registry()))
        try:
            await until(lambda: worker.phase == "open", 10, what="the first session")
            proxy.blackhole()
            await until(lambda: any(w > 4 for w in lines.waits()), 40, what="a reconnect wait above 4 s")
            assert any("no answer to an HTTP/2 PING" in line for line in lines.lines)
            assert any("the connection to the server was lost" in line for line in lines.lines)
            await proxy.heal()
            healed = time.monotonic()
            await until(lambda: worker.phase == "open", 10, what="the session after the heal")
            assert time.monotonic() - healed < 2.0
        finally:
            worker.stop()
            await run


def test_an_address_that_accepts_but_fails_the_session_keeps_the_full_backoff() -> None:
    """A listener that closes every connection at once: not a refusal, so no probe connects and
    each wait is the §5.9 draw (worst jitter: 0.5, 1, 2, 4 s), not cut short."""
    asyncio.run(_accepting_but_failing())


async def _accepting_but_failing() -> None:
    accepted: list[float] = []

    async def slam(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(time.monotonic())
        writer.close()

    listener = await asyncio.start_server(slam, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    logger, lines = _logger("slam")
    worker = Worker(f"http://127.0.0.1:{port}", logger=logger, rng=lambda: WORST)
    run = asyncio.create_task(worker.run(Registry()))
    try:
        await until(lambda: len(lines.waits()) >= 4, 20, what="four reconnect waits")
        await until(lambda: len(accepted) >= 4, 10, what="the fourth attempt")
        waits = lines.waits()[:4]
        assert [round(w / WORST, 1) for w in waits] == [0.5, 1.0, 2.0, 4.0], waits
        gaps = [b - a for a, b in itertools.pairwise(accepted)]
        assert gaps[2] > 0.9 * waits[2], (gaps, waits)  # the 2 s wait ran in full: nothing cut it
        assert len(accepted) - len(lines.waits()) in (0, 1), "a connection that was not a session attempt"
        assert not any("answers again" in line for line in lines.lines)
    finally:
        worker.stop()
        await run
        listener.close()
        await listener.wait_closed()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_the_probe_answers_over_tls_only_for_a_verified_h2_server(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """An ``https://`` address is probed over TLS with ALPN h2: verified against our CA, the PING is
    answered; with the system's store the handshake fails, and the probe keeps on, not answered."""
    certs = make_certs(tmp_path)
    server = server_factory(
        ["--dev", "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    )
    asyncio.run(_probe_over_tls(server.url, str(certs.ca)))


async def _probe_over_tls(url: str, ca_file: str) -> None:
    dials: list[str] = []

    async def counted(factory: Any, target: Target, *, tls: Any, server_hostname: str | None) -> Any:
        try:
            return await dial_tcp(factory, target, tls=tls, server_hostname=server_hostname)
        finally:
            dials.append(target.scheme)

    answered: list[int] = []
    trusted = HealProbe([url], answered.append, lambda: 0.0, tls=TLSOptions(ca_file=ca_file), dialer=counted)
    trusted.start()
    try:
        await until(lambda: answered, 10, what="the probe's answer over TLS")
    finally:
        trusted.cancel()
    assert answered == [0] and dials[0] == "https"

    refused_by_us: list[int] = []
    dials.clear()
    untrusted = HealProbe([url], refused_by_us.append, lambda: 0.0, dialer=counted)
    untrusted.start()
    try:
        await until(lambda: len(dials) >= 3, 10, what="three probes with an unverified certificate")
    finally:
        untrusted.cancel()
    assert refused_by_us == []
