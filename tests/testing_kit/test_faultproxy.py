"""FaultProxy over real loopback sockets: forwarding, blackholes each way, stall, latency, reset, refuse."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import pytest

from conveyor_sdk.testing import FaultProxy, SyncFaultProxy
from tests._util import eventually, wait_until


class Target:
    """A TCP server on port 0 that keeps each accepted connection for the test to drive."""

    def __init__(self) -> None:
        self.conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.server: asyncio.Server | None = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.conns.append((reader, writer))

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def last(self, count: int = 1) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        async def arrived() -> bool:
            return len(self.conns) >= count

        await eventually(arrived, timeout=5, what=f"connection {count} at the target")
        return self.conns[count - 1]


@contextlib.asynccontextmanager
async def rig() -> AsyncIterator[tuple[Target, FaultProxy]]:
    target = Target()
    target.server = await asyncio.start_server(target._accept, "127.0.0.1", 0)
    async with FaultProxy(target.address) as proxy:
        yield target, proxy
    for _, writer in target.conns:
        writer.close()
    target.server.close()
    await target.server.wait_closed()


async def connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def silent(reader: asyncio.StreamReader, proxy: FaultProxy, field: str, size: int) -> None:
    """Wait until the proxy dropped ``size`` bytes in ``field``; nothing may have reached ``reader``."""

    async def dropped() -> bool:
        return int(getattr(proxy.stats, field)) >= size

    await eventually(dropped, timeout=5, what=field)
    await asyncio.sleep(0)  # let any byte that was (wrongly) forwarded land in the reader first
    assert reader._buffer == b"", bytes(reader._buffer)  # type: ignore[attr-defined]


def test_forwards_both_ways_and_half_close() -> None:
    """Bytes pass both ways unchanged and a client's EOF reaches the target as EOF."""

    async def main() -> None:
        async with rig() as (target, proxy):
            reader, writer = await connect(proxy)
            t_reader, t_writer = await target.last()
            writer.write(b"ping")
            assert await t_reader.readexactly(4) == b"ping"
            t_writer.write(b"pong")
            await t_writer.drain()
            assert await reader.readexactly(4) == b"pong"
            writer.write_eof()
            assert await asyncio.wait_for(t_reader.read(), 5) == b""
            writer.close()
            assert proxy.stats.bytes_up == 4 and proxy.stats.bytes_down == 4

    asyncio.run(main())


@pytest.mark.parametrize("direction", ["both", "up", "down"])
def test_blackhole_drops_the_chosen_directions_and_heal_resets_the_holed_connection(direction: str) -> None:
    """Dropped directions deliver nothing (sockets open), the other flows; heal resets, new ones work."""

    async def main() -> None:
        async with rig() as (target, proxy):
            reader, writer = await connect(proxy)
            t_reader, t_writer = await target.last()
            proxy.blackhole(direction)  # type: ignore[arg-type]
            writer.write(b"up!")
            t_writer.write(b"down")
            await t_writer.drain()
            if direction in ("both", "up"):
                await silent(t_reader, proxy, "dropped_up", 3)
            else:
                assert await t_reader.readexactly(3) == b"up!"
            if direction in ("both", "down"):
                await silent(reader, proxy, "dropped_down", 4)
            else:
                assert await reader.readexactly(4) == b"down"
            await proxy.heal()
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(reader.read(10), 5)
            writer.close()
            _, writer2 = await connect(proxy)
            t_reader2, _ = await target.last(2)
            writer2.write(b"again")
            assert await t_reader2.readexactly(5) == b"again"
            writer2.close()

    asyncio.run(main())


def test_stall_blocks_the_sender_and_heal_delivers_every_byte() -> None:
    """Stalled: the client's writes back up (nothing reaches the target); heal delivers all, in order."""

    async def main() -> None:
        async with rig() as (target, proxy):
            _, writer = await connect(proxy)
            t_reader, _ = await target.last()
            proxy.blackhole("up", mode="stall")
            payload = bytes(range(256)) * (32 * 1024)  # 8 MiB: more than the socket buffers hold
            writer.write(payload)

            async def backed_up() -> bool:
                return writer.transport.get_write_buffer_size() > 0

            await eventually(backed_up, timeout=5, what="the client's write buffer to fill")
            assert t_reader._buffer == b""  # type: ignore[attr-defined]
            assert proxy.stats.bytes_up == 0
            await proxy.heal()
            assert await asyncio.wait_for(t_reader.readexactly(len(payload)), 10) == payload
            writer.close()

    asyncio.run(main())


def test_latency_delays_each_way_without_capping_throughput() -> None:
    """200 ms each way: a round trip takes >= 400 ms; ten pipelined round trips take about one."""

    async def main() -> None:
        async with rig() as (target, proxy):
            reader, writer = await connect(proxy)
            t_reader, t_writer = await target.last()
            proxy.latency(0.2)
            start = time.monotonic()
            for _ in range(10):
                writer.write(b"x")
                await writer.drain()
            for _ in range(10):
                t_writer.write(await t_reader.readexactly(1))
            await reader.readexactly(10)
            elapsed = time.monotonic() - start
            assert 0.4 <= elapsed < 1.2, elapsed
            proxy.latency(0)
            start = time.monotonic()
            writer.write(b"y")
            t_writer.write(await t_reader.readexactly(1))
            await reader.readexactly(1)
            assert time.monotonic() - start < 0.2
            writer.close()

    asyncio.run(main())


def test_reset_aborts_both_sides_with_rst() -> None:
    """reset(): the client and the target each see ECONNRESET; the proxy still accepts new connections."""

    async def main() -> None:
        async with rig() as (target, proxy):
            reader, writer = await connect(proxy)
            t_reader, _ = await target.last()
            assert proxy.reset() == 1
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(reader.read(10), 5)
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(t_reader.read(10), 5)
            writer.close()
            _, writer2 = await connect(proxy)
            await target.last(2)
            writer2.close()
            assert proxy.stats.resets == 1

    asyncio.run(main())


def test_refuse_fails_new_connects_keeps_open_ones_and_heal_listens_on_the_same_port() -> None:
    """refuse(): connect gets ECONNREFUSED, an open connection still flows; heal(): the same port accepts."""

    async def main() -> None:
        async with rig() as (target, proxy):
            _, writer = await connect(proxy)
            t_reader, _ = await target.last()
            port = proxy.port
            proxy.refuse()
            with pytest.raises(ConnectionRefusedError):
                await connect(proxy)
            writer.write(b"still")
            assert await t_reader.readexactly(5) == b"still"
            await proxy.heal()
            assert proxy.port == port
            _, writer2 = await connect(proxy)
            await target.last(2)
            writer.close()
            writer2.close()

    asyncio.run(main())


def test_a_target_that_is_down_closes_the_client() -> None:
    """No target listening: the accepted client is reset and the failure counted."""

    async def main() -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = f"127.0.0.1:{probe.getsockname()[1]}"
        async with FaultProxy(free) as proxy:
            reader, writer = await connect(proxy)
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(reader.read(10), 5)
            writer.close()
            assert proxy.stats.target_failures == 1

    asyncio.run(main())


def test_sync_wrapper_forwards_and_blackholes_from_a_thread() -> None:
    """SyncFaultProxy: a blocking client goes through; after blackhole('down') no reply arrives."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with SyncFaultProxy(f"127.0.0.1:{listener.getsockname()[1]}") as proxy:
            client = socket.create_connection(("127.0.0.1", int(proxy.address.rsplit(":", 1)[1])), 5)
            server, _ = listener.accept()
            with client, server:
                server.sendall(b"hello")
                assert client.recv(5) == b"hello"
                proxy.blackhole("down")
                server.sendall(b"lost")
                wait_until(lambda: proxy.stats.dropped_down == 4, timeout=5, what="the drop")
                client.settimeout(0.05)
                with pytest.raises(TimeoutError):
                    client.recv(4)


def test_bad_arguments_are_value_errors() -> None:
    """A bad target, direction, mode or latency is a ValueError naming the value."""
    with pytest.raises(ValueError, match="host:port"):
        FaultProxy("nowhere")

    async def main() -> None:
        async with FaultProxy("127.0.0.1:1") as proxy:
            with pytest.raises(ValueError, match="sideways"):
                proxy.blackhole("sideways")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="mode"):
                proxy.blackhole(mode="eat")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="-1"):
                proxy.latency(-1)

    asyncio.run(main())
