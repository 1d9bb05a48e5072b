"""The session stream's keepalive over real sockets: a blackholing proxy between it and a ScriptedPeer."""

from __future__ import annotations

import asyncio
import socket
import sys
import time

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._transport import TransportOptions, open_session
from conveyor_sdk._transport.keepalive import KeepaliveOptions
from conveyor_sdk.errors import Unavailable
from conveyor_sdk.testing import ScriptedPeer
from conveyor_sdk.testing.faultproxy import FaultProxy
from tests._util import eventually
from tests.sdk_transport._helpers import HELLO, WELCOME

FAST = KeepaliveOptions(interval=0.2, timeout=0.5)
BIG = pb.WorkerMessage(
    result=pb.Result(task_id="t", outcome=pb.TASK_OUTCOME_SUCCESS, result=b"x" * (2 << 20))
)
BOUND = FAST.interval + FAST.timeout  # from the last answered PING to the verdict


async def _through_proxy(peer: ScriptedPeer, proxy: FaultProxy, keepalive: KeepaliveOptions | None = FAST):  # type: ignore[no-untyped-def]
    stream = await open_session(proxy.url, TransportOptions(keepalive=keepalive))
    await stream.send(HELLO)
    sess = await peer.accept()
    assert await sess.recv() == HELLO
    await sess.send(WELCOME)
    assert (await stream.recv()) == WELCOME
    return stream, sess


def test_healthy_link_is_pinged_and_stays_up() -> None:
    """On a live link PINGs go out every interval and are answered; the stream stays open."""

    async def main() -> None:
        async with ScriptedPeer() as peer, FaultProxy(peer.url.removeprefix("http://")) as proxy:
            stream, _ = await _through_proxy(peer, proxy)
            async with stream:

                async def answered() -> bool:
                    stats = stream.statistics()
                    return stats["pings_sent"] >= 4 and stats["ping_rtt"] is not None

                await eventually(answered, timeout=10, what="four PINGs")
                assert not stream.statistics()["finished"]

    asyncio.run(main())


@pytest.mark.parametrize("direction", ["both", "down", "up"])
def test_blackhole_ends_the_stream_within_the_timeout(direction: str) -> None:
    """Bytes dropped (both ways or one way): recv raises a transient Unavailable within interval + timeout."""

    async def main() -> None:
        async with ScriptedPeer() as peer, FaultProxy(peer.url.removeprefix("http://")) as proxy:
            stream, _ = await _through_proxy(peer, proxy)
            async with stream:
                proxy.blackhole(direction, mode="drop")  # type: ignore[arg-type]
                started = time.monotonic()
                with pytest.raises(
                    Unavailable, match=r"dead: no answer to an HTTP/2 PING within 0\.5s"
                ) as info:
                    await asyncio.wait_for(stream.recv(), 10)
                took = time.monotonic() - started
                assert info.value.retryable
                assert took <= BOUND + 0.5, took

    asyncio.run(main())


def test_without_keepalive_a_blackhole_goes_unnoticed() -> None:
    """The counter-check: keepalive=None leaves a blackholed stream waiting (what the issue saw)."""

    async def main() -> None:
        async with ScriptedPeer() as peer, FaultProxy(peer.url.removeprefix("http://")) as proxy:
            stream, _ = await _through_proxy(peer, proxy, keepalive=None)
            async with stream:
                proxy.blackhole("both", mode="drop")
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(stream.recv(), 3 * BOUND)

    asyncio.run(main())


def test_stuck_large_send_fails_within_the_timeout() -> None:
    """A 2 MiB message behind a stalled link (past the window): send raises instead of waiting forever."""

    async def main() -> None:
        async with ScriptedPeer() as peer, FaultProxy(peer.url.removeprefix("http://")) as proxy:
            stream, _ = await _through_proxy(peer, proxy)
            async with stream:
                proxy.blackhole("both", mode="stall")
                started = time.monotonic()
                with pytest.raises(Unavailable, match="the connection to the server is dead"):
                    await asyncio.wait_for(stream.send(BIG), 10)
                assert time.monotonic() - started <= BOUND + 0.5
                with pytest.raises(Unavailable):  # and it stays failed
                    stream.send_nowait(HELLO)

    asyncio.run(main())


def test_send_nowait_never_waits_and_fails_later_sends() -> None:
    """send_nowait returns at once even past the window; the keepalive ends the stream, later sends raise."""

    async def main() -> None:
        async with ScriptedPeer() as peer, FaultProxy(peer.url.removeprefix("http://")) as proxy:
            stream, _ = await _through_proxy(peer, proxy)
            async with stream:
                proxy.blackhole("both", mode="stall")
                stream.send_nowait(BIG)  # returns: nothing awaited
                assert stream.write_blocked
                with pytest.raises(Unavailable):
                    await asyncio.wait_for(stream.recv(), 10)
                with pytest.raises(Unavailable):
                    stream.send_nowait(HELLO)

    asyncio.run(main())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_USER_TIMEOUT, TCP_KEEPIDLE: Linux")
def test_session_socket_has_tcp_keepalive_and_user_timeout() -> None:
    """The session socket has SO_KEEPALIVE on, 15 s idle, 5 s x 3 probes and a 30 s TCP_USER_TIMEOUT."""

    async def main() -> None:
        async with ScriptedPeer() as peer:
            stream = await open_session(peer.url, TransportOptions())
            async with stream:
                assert stream._transport is not None
                sock = stream._transport.get_extra_info("socket")
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 15
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 5
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 30000

    asyncio.run(main())
