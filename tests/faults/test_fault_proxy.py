"""FaultProxy does what docs/faults.md's table says, over real loopback sockets (an echo server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from conveyor_sdk.testing import FaultProxy, SyncFaultProxy

QUIET = 0.3  # how long "nothing arrives" is watched for: a read that must time out


@asynccontextmanager
async def _echo_and_proxy() -> AsyncIterator[FaultProxy]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with FaultProxy(f"127.0.0.1:{port}") as proxy:
            yield proxy
    finally:
        server.close()
        await server.wait_closed()


async def _connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def _roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), 5)


async def _silent(reader: asyncio.StreamReader) -> bool:
    try:
        await asyncio.wait_for(reader.read(1), QUIET)
    except TimeoutError:
        return True
    return False


def test_blackhole_drop_keeps_sockets_open_and_heal_resets_the_holed_connection() -> None:
    async def main() -> None:
        async with _echo_and_proxy() as proxy:
            reader, writer = await _connect(proxy)
            assert await _roundtrip(reader, writer, b"ping") == b"ping"
            proxy.blackhole()
            writer.write(b"lost")
            assert await _silent(reader)  # no answer, no error: the socket stays open
            assert not writer.is_closing()
            late_r, late_w = await _connect(proxy)  # a connection opened during the blackhole
            late_w.write(b"late")
            assert await _silent(late_r)
            assert proxy.stats.dropped_up >= 8
            await proxy.heal()
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
                await asyncio.wait_for(reader.readexactly(1), 5)  # its stream had a hole: reset
            fresh_r, fresh_w = await _connect(proxy)
            assert await _roundtrip(fresh_r, fresh_w, b"back") == b"back"
            for w in (writer, late_w, fresh_w):
                w.close()

    asyncio.run(main())


def test_one_way_blackholes_drop_only_their_direction() -> None:
    async def main() -> None:
        async with _echo_and_proxy() as proxy:
            reader, writer = await _connect(proxy)
            await _roundtrip(reader, writer, b"x")
            proxy.blackhole("down")  # target to client: the echo server gets it, we hear nothing
            before = proxy.stats.bytes_up
            writer.write(b"up")
            assert await _silent(reader)
            assert proxy.stats.bytes_up == before + 2 and proxy.stats.dropped_down >= 2
            await proxy.heal()
            proxy.blackhole("up")
            r2, w2 = await _connect(proxy)
            w2.write(b"gone")
            assert await _silent(r2)
            assert proxy.stats.dropped_up >= 4
            with pytest.raises(ValueError, match="direction must be"):
                proxy.blackhole("sideways")  # type: ignore[arg-type]
            writer.close()
            w2.close()

    asyncio.run(main())


def test_blackhole_stall_delivers_everything_on_heal() -> None:
    async def main() -> None:
        async with _echo_and_proxy() as proxy:
            reader, writer = await _connect(proxy)
            await _roundtrip(reader, writer, b"x")
            proxy.blackhole(mode="stall")
            writer.write(b"held")
            assert await _silent(reader)
            await proxy.heal()
            assert await asyncio.wait_for(reader.readexactly(4), 5) == b"held"  # nothing lost, no reset
            writer.close()

    asyncio.run(main())


def test_latency_delays_each_way() -> None:
    async def main() -> None:
        async with _echo_and_proxy() as proxy:
            reader, writer = await _connect(proxy)
            await _roundtrip(reader, writer, b"x")
            proxy.latency(0.2)
            started = time.monotonic()
            assert await _roundtrip(reader, writer, b"slow") == b"slow"
            assert time.monotonic() - started >= 0.4  # 200 ms up, 200 ms down
            with pytest.raises(ValueError, match="latency must be >= 0"):
                proxy.latency(-1)
            writer.close()

    asyncio.run(main())


def test_reset_aborts_open_connections_and_counts_them() -> None:
    async def main() -> None:
        async with _echo_and_proxy() as proxy:
            conns = [await _connect(proxy) for _ in range(2)]
            for reader, writer in conns:
                await _roundtrip(reader, writer, b"x")
            assert proxy.reset() == 2 and proxy.stats.resets == 2
            for reader, writer in conns:
                with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                    await asyncio.wait_for(reader.readexactly(1), 5)
                writer.close()
            r, w = await _connect(proxy)  # the listener is still there
            assert await _roundtrip(r, w, b"y") == b"y"
            w.close()

    asyncio.run(main())


def test_refuse_closes_the_listener_keeps_open_connections_and_heal_listens_on_the_same_port() -> None:
    async def main() -> None:
        async with _echo_and_proxy() as proxy:
            reader, writer = await _connect(proxy)
            port = proxy.port
            proxy.refuse()
            assert proxy.refusing
            with pytest.raises(ConnectionRefusedError):
                await _connect(proxy)
            assert await _roundtrip(reader, writer, b"still") == b"still"
            await proxy.heal()
            assert proxy.port == port and not proxy.refusing
            r, w = await _connect(proxy)
            assert await _roundtrip(r, w, b"again") == b"again"
            assert proxy.stats.accepted == 2
            writer.close()
            w.close()

    asyncio.run(main())


def test_sync_fault_proxy_runs_the_same_proxy_from_a_thread() -> None:
    async def echo_server() -> tuple[asyncio.Server, int]:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.read(100))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        return server, server.sockets[0].getsockname()[1]

    async def main() -> None:
        server, port = await echo_server()
        with SyncFaultProxy(f"127.0.0.1:{port}") as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", int(proxy.address.rpartition(":")[2]))
            assert await _roundtrip(reader, writer, b"hi") == b"hi"
            assert proxy.stats.accepted == 1
            proxy.refuse()
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection("127.0.0.1", int(proxy.address.rpartition(":")[2]))
            writer.close()
        server.close()

    asyncio.run(main())
