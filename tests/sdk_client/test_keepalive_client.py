"""The producer client over a blackholed link: calls fail within their deadline, dead connections go."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

from conveyor_sdk._client.h2transport import H2Transport
from conveyor_sdk._transport.keepalive import KeepaliveOptions
from conveyor_sdk.client import Client, RetryConfig, SyncClient
from conveyor_sdk.errors import DeadlineExceeded, Unavailable
from conveyor_sdk.testing.faultproxy import FaultProxy
from tests.sdk_client.test_h2_transport import until

FAST = KeepaliveOptions(interval=0.2, timeout=0.5)
BOUND = FAST.interval + FAST.timeout
PATH = "/conveyor.v1.TaskService/GetTask"
FIELDS = (("content-type", "application/proto"),)


def test_a_call_on_a_blackholed_connection_fails_within_its_deadline(url: str) -> None:
    """Client defaults: after a blackhole, get_task(rpc_timeout=1) ends in about 1 s instead of hanging."""

    async def main() -> None:
        proxy = FaultProxy(url.removeprefix("http://"))
        async with proxy, Client(proxy.url, retry=RetryConfig(attempts=1)) as client:
            info = await client.enqueue("ka:t")
            proxy.blackhole("both")
            started = time.monotonic()
            with pytest.raises((DeadlineExceeded, Unavailable)):
                await asyncio.wait_for(client.get_task(info.id, rpc_timeout=1.0), 10)
            assert time.monotonic() - started <= 1.0 + 0.5

    asyncio.run(main())


def test_a_dead_connection_fails_its_calls_within_the_keepalive_bound_and_is_replaced(url: str) -> None:
    """A PING unanswered for the keepalive timeout fails an open call (30 s deadline) with Unavailable;
    after the heal the next call opens a fresh connection."""

    async def main() -> None:
        async with FaultProxy(url.removeprefix("http://")) as proxy:
            h2 = H2Transport(proxy.url, keepalive=FAST)
            try:
                assert (await h2.exchange(PATH, FIELDS, b"", 5)).status
                proxy.blackhole("both")
                started = time.monotonic()
                with pytest.raises(Unavailable, match="is dead: no answer to an HTTP/2 PING"):
                    await h2.exchange(PATH, FIELDS, b"", 30)
                assert time.monotonic() - started <= BOUND + 0.5
                await proxy.heal()
                assert (await h2.exchange(PATH, FIELDS, b"", 5)).status
                assert h2.connections == 2
            finally:
                await h2.aclose()

    asyncio.run(main())


def test_the_first_call_after_idle_carries_a_ping(url: str) -> None:
    """A pooled connection unused for the PING interval sends a PING with its next call (answered),
    and no timer runs while it is idle."""

    async def main() -> None:
        h2 = H2Transport(url, keepalive=FAST)
        try:
            await h2.exchange(PATH, FIELDS, b"", 5)
            conn = h2._conn
            assert conn is not None and conn.keepalive is not None
            ka, loop = conn.keepalive, asyncio.get_running_loop()
            await until(lambda: conn._ka_timer is None and loop.time() >= ka.last_ack + ka.interval)
            before = ka.pings
            await h2.exchange(PATH, FIELDS, b"", 5)
            assert ka.pings == before + 1
            await until(lambda: ka.outstanding is None)
            assert ka.rtt is not None and ka.rtt < FAST.timeout
        finally:
            await h2.aclose()

    asyncio.run(main())


def test_open_calls_are_pinged_on_a_live_link() -> None:
    """A slow call on a live link: PINGs every interval are answered and the call completes."""
    from tests.sdk_client._h2peer import Knobs, UnaryPeer

    async def main() -> None:
        async with UnaryPeer(Knobs(delay=4 * BOUND)) as peer:
            h2 = H2Transport(peer.url, keepalive=FAST)
            try:
                reply = await h2.exchange(PATH, FIELDS, b"", 30)
                assert reply.status == 200
                conn = h2._conn
                assert conn is not None and conn.keepalive is not None
                assert conn.keepalive.pings >= 3 and not conn.closed
            finally:
                await h2.aclose()

    asyncio.run(main())


def test_client_keepalive_options_bound_a_call_on_a_dead_link(url: str) -> None:
    """Client(keepalive_interval=0.2, keepalive_timeout=0.5): a call with a 30 s deadline on a
    blackholed connection fails with Unavailable within the keepalive bound (defaults: ~10-15 s)."""

    async def main() -> None:
        async with FaultProxy(url.removeprefix("http://")) as proxy:
            options = {"keepalive_interval": 0.2, "keepalive_timeout": 0.5}
            async with Client(proxy.url, retry=RetryConfig(attempts=1), **options) as client:
                info = await client.enqueue("ka:t")
                proxy.blackhole("both")
                started = time.monotonic()
                with pytest.raises(Unavailable, match="no answer to an HTTP/2 PING"):
                    await asyncio.wait_for(client.get_task(info.id, rpc_timeout=30), 5)
                assert time.monotonic() - started <= BOUND + 0.5

    asyncio.run(main())


@pytest.mark.parametrize(
    ("option", "value"),
    [("keepalive_interval", 0), ("keepalive_timeout", -1.0), ("keepalive_interval", "5s"),
     ("keepalive_timeout", True), ("keepalive_interval", float("inf")), ("keepalive_timeout", timedelta(0))],
)  # fmt: skip
def test_client_keepalive_options_are_validated(option: str, value: object) -> None:
    with pytest.raises(ValueError, match=r"keepalive.(interval|timeout) must be a positive number"):
        Client("http://127.0.0.1:1", **{option: value})  # type: ignore[arg-type]


def test_client_keepalive_accepts_timedelta_and_the_blocking_client_refuses_it() -> None:
    client = Client("http://127.0.0.1:1", keepalive_interval=timedelta(seconds=2), keepalive_timeout=3)
    assert (client._keepalive.interval, client._keepalive.timeout) == (2.0, 3.0)
    assert client._h2 is not None and client._h2._keepalive is client._keepalive
    with pytest.raises(TypeError, match="keepalive_timeout: the blocking SyncClient sends no HTTP/2 PINGs"):
        SyncClient("http://127.0.0.1:1", keepalive_timeout=3)
