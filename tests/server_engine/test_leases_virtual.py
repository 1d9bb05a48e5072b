"""A worker session over the SDK transport and an in-memory connection, the server in virtual time:
a dropped connection releases its task free; a lease the heartbeats leave out lapses into a charged retry."""

from __future__ import annotations

import asyncio

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._transport import SessionStream, TransportOptions, open_session
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_server_min._services import Services, build_services
from conveyor_server_min._services.loops import VirtualTime
from conveyor_server_min.config import ServerConfig
from conveyor_server_min.server import Server
from tests._util import eventually
from tests.server_engine._harness import FAST, enqueue, get

S = tpb.TaskState


async def _open(server: MemoryServer, queue: str) -> tuple[SessionStream, str]:
    """A session on ``queue`` that got its Welcome and then a Dispatch; returns it and the task id."""
    stream = await open_session(server.url, TransportOptions(), dialer=server.dial)
    await stream.send(pb.WorkerMessage(hello=pb.Hello(queues={queue: 1}, concurrency=2)))
    first = await stream.recv()
    assert first is not None and first.WhichOneof("frame") == "welcome", first
    assert first.welcome.lease_ttl.ToNanoseconds() == 2_000_000_000
    msg = await stream.recv()
    assert msg is not None and msg.WhichOneof("frame") == "dispatch", msg
    return stream, msg.dispatch.task.id


def test_disconnect_releases_and_lease_expiry_charges_a_retry() -> None:
    """A dropped connection releases its task (no retry); a lease heartbeats leave out lapses at lease_ttl."""

    async def main() -> None:
        vt = VirtualTime()
        services: Services = build_services(FAST, clock=vt.clock, ticker_time=vt)
        async with MemoryServer(Server(ServerConfig(dev=True), services=services)) as server:
            info = await enqueue(services, queue="leases")
            stream, task_id = await _open(server, "leases")
            assert task_id == info.id
            await stream.aclose()

            async def released() -> bool:
                return (await get(services, info.id)).state == S.TASK_STATE_PENDING

            await eventually(released, timeout=5, what="the task released")
            assert (await get(services, info.id)).retried == 0
            stream, _ = await _open(server, "leases")
            for _ in range(4):  # alive (so not closed as silent) for 1.9 s, but never listing the task
                await stream.send(pb.WorkerMessage(heartbeat=pb.Heartbeat()))
                await vt.advance(0.475)
            held = await get(services, info.id)
            assert (held.state, held.retried) == (S.TASK_STATE_ACTIVE, 0)
            await stream.send(pb.WorkerMessage(heartbeat=pb.Heartbeat()))
            await vt.advance(0.1 + FAST.reap_interval)
            lapsed = await get(services, info.id)
            assert (lapsed.retried, lapsed.last_error) == (1, "lease expired")
            await stream.aclose()

    asyncio.run(main())
