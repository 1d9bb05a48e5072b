"""Transport + real engine in a server process: RST_STREAM releases leases; gRPC and Connect workers mix."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_server_min.testing import ServerProcess

from .h2client import H2Client

SESSION = "/conveyor.v1.WorkerService/Session"


def _task(url: str, task_id: str) -> dict[str, object]:
    resp = httpx.post(url + "/conveyor.v1.TaskService/GetTask", json={"id": task_id})
    assert resp.status_code == 200, resp.text
    task: dict[str, object] = resp.json()["task"]
    return task


async def _session(client: H2Client, ctype: str, queue: str) -> int:
    sid = await client.open(SESSION, ctype)
    hello = pb.WorkerMessage(hello=pb.Hello(queues={queue: 1}, concurrency=4, sdk_version="test"))
    await client.send_msg(sid, hello)
    return sid


def test_rst_stream_releases_the_sessions_leases(server_proc: Callable[..., ServerProcess]) -> None:
    """A worker resetting its Session loses its lease at once (no retry charged); another worker gets it."""
    proc = server_proc(["--lease-ttl", "60s"])
    enq = httpx.post(
        proc.url + "/conveyor.v1.TaskService/Enqueue", json={"queue": "rst", "type": "t", "payload": "e30="}
    )
    task_id = enq.json()["task"]["id"]
    host, port = proc.address.rsplit(":", 1)

    async def main() -> None:
        first = await H2Client().connect(host, int(port))
        sid = await _session(first, "application/grpc", "rst")
        msgs = await first.server_messages(sid, 2)
        assert msgs[1].dispatch.task.id == task_id
        assert _task(proc.url, task_id)["state"] == "TASK_STATE_ACTIVE"
        await first.reset(sid)
        second = await H2Client().connect(host, int(port))
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

    asyncio.run(main())
    task = _task(proc.url, task_id)
    assert task["state"] == "TASK_STATE_COMPLETED" and task.get("retried", 0) == 0


def test_large_batch_dispatch_flows_through_a_small_window(server_proc: Callable[..., ServerProcess]) -> None:
    """A 40-member BatchDispatch of 64 KiB payloads (~2.6 MB) reaches a worker with a 64 KiB window."""
    proc = server_proc(["--group-max-size", "40", "--group-sweep-interval", "100ms"])
    item = pb.EnqueueRequest(queue="grp", type="bt", payload=b"p" * 65536, group="g")
    batch = pb.EnqueueBatchRequest(tasks=[item] * 40).SerializeToString()
    resp = httpx.post(
        proc.url + "/conveyor.v1.TaskService/EnqueueBatch",
        content=batch,
        headers={"content-type": "application/proto"},
    )
    assert resp.status_code == 200
    ids = [r.task.id for r in pb.EnqueueBatchResponse.FromString(resp.content).results]
    assert len(ids) == 40 and all(ids)
    host, port = proc.address.rsplit(":", 1)

    async def main() -> None:
        client = await H2Client(window=65535).connect(host, int(port))
        sid = await client.open(SESSION)
        hello = pb.Hello(queues={"grp": 1}, concurrency=1, sdk_version="test", batch_types=["bt"])
        await client.send_msg(sid, pb.WorkerMessage(hello=hello))
        msgs = await client.server_messages(sid, 2, timeout=30)
        members = msgs[1].batch_dispatch.tasks
        assert sorted(t.id for t in members) == sorted(ids)
        assert all(len(t.payload) == 65536 for t in members)
        results = [pb.Result(task_id=t.id, outcome=pb.TASK_OUTCOME_SUCCESS) for t in members]
        await client.send_msg(sid, pb.WorkerMessage(batch_result=pb.BatchResult(results=results)), end=True)
        assert (await client.wait(sid)).trailers["grpc-status"] == "0"
        await client.close()

    asyncio.run(main())
    assert _task(proc.url, ids[0])["state"] == "TASK_STATE_COMPLETED"
