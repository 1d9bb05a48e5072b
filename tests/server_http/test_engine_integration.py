"""Transport + real engine, in-process over in-memory connections: RST_STREAM releases leases; gRPC and
Connect workers mix; a large BatchDispatch flows through a small window. (The same server over real
sockets and processes: test_process.py, test_silent_session.py, tests/server_engine/test_e2e.py.)"""

from __future__ import annotations

import asyncio
import dataclasses

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_server_min.config import ServerConfig
from conveyor_server_min.server import Server
from conveyor_server_min.service_api import EngineConfig
from tests.server_engine._harness import call, get

from .h2client import H2Client

SESSION = "/conveyor.v1.WorkerService/Session"
S = tpb.TaskState


async def _session(client: H2Client, ctype: str, queue: str) -> int:
    sid = await client.open(SESSION, ctype)
    hello = pb.WorkerMessage(hello=pb.Hello(queues={queue: 1}, concurrency=4, sdk_version="test"))
    await client.send_msg(sid, hello)
    return sid


def _server(**engine: object) -> MemoryServer:
    config = ServerConfig(dev=True, engine=dataclasses.replace(EngineConfig(), **engine))  # type: ignore[arg-type]
    return MemoryServer(Server(config))


def test_rst_stream_releases_the_sessions_leases() -> None:
    """A worker resetting its Session loses its lease at once (no retry charged); another worker gets it."""

    async def main() -> None:
        async with _server(lease_ttl=60.0) as server:
            services = server.server.services
            enq = await call(services, "Enqueue", pb.EnqueueRequest(queue="rst", type="t", payload=b"{}"))
            task_id = enq.task.id
            first = await H2Client().connect_memory(server)
            sid = await _session(first, "application/grpc", "rst")
            msgs = await first.server_messages(sid, 2)
            assert msgs[1].dispatch.task.id == task_id
            assert (await get(services, task_id)).state == S.TASK_STATE_ACTIVE
            await first.reset(sid)
            second = await H2Client().connect_memory(server)
            sid2 = await _session(second, "application/connect+proto", "rst")
            again = await second.server_messages(sid2, 2, timeout=20)
            assert again[1].dispatch.task.id == task_id and again[1].dispatch.task.retried == 0
            result = pb.WorkerMessage(result=pb.Result(task_id=task_id, outcome=pb.TASK_OUTCOME_SUCCESS))
            await second.send_msg(sid2, result)
            await second.end(sid2)
            st = await second.wait(sid2)
            assert st.messages[-1][0] == 0x02 and st.messages[-1][1] == b"{}"
            await first.close()
            await second.close()
            task = await get(services, task_id)
            assert (task.state, task.retried) == (S.TASK_STATE_COMPLETED, 0)

    asyncio.run(main())


def test_large_batch_dispatch_flows_through_a_small_window() -> None:
    """A 40-member BatchDispatch of 64 KiB payloads (~2.6 MB) reaches a worker with a 64 KiB window."""

    async def main() -> None:
        async with _server(group_max_size=40, group_sweep_interval=0.1) as server:
            services = server.server.services
            item = pb.EnqueueRequest(queue="grp", type="bt", payload=b"p" * 65536, group="g")
            resp = await call(services, "EnqueueBatch", pb.EnqueueBatchRequest(tasks=[item] * 40))
            ids = [r.task.id for r in resp.results]
            assert len(ids) == 40 and all(ids)
            client = await H2Client(window=65535).connect_memory(server)
            sid = await client.open(SESSION)
            hello = pb.Hello(queues={"grp": 1}, concurrency=1, sdk_version="test", batch_types=["bt"])
            await client.send_msg(sid, pb.WorkerMessage(hello=hello))
            msgs = await client.server_messages(sid, 2, timeout=30)
            members = msgs[1].batch_dispatch.tasks
            assert sorted(t.id for t in members) == sorted(ids)
            assert all(len(t.payload) == 65536 for t in members)
            results = [pb.Result(task_id=t.id, outcome=pb.TASK_OUTCOME_SUCCESS) for t in members]
            batch = pb.WorkerMessage(batch_result=pb.BatchResult(results=results))
            await client.send_msg(sid, batch, end=True)
            assert (await client.wait(sid)).trailers["grpc-status"] == "0"
            await client.close()
            assert (await get(services, ids[0])).state == S.TASK_STATE_COMPLETED

    asyncio.run(main())
