"""End to end over a real server on port 0: unary RPCs via connectrpc, sessions via the SDK transport."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from connectrpc.errors import ConnectError

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._gen.conveyor.v1.service_connect import AdminServiceClientSync, TaskServiceClientSync
from conveyor_sdk._transport import TransportOptions, open_session
from conveyor_sdk.errors import Code, ConveyorError
from tests._util import wait_until

S = tpb.TaskState


@pytest.fixture(scope="module")
def tasks(url: str) -> TaskServiceClientSync:
    return TaskServiceClientSync(url, send_compression=None)


def _state(tasks: TaskServiceClientSync, task_id: str) -> int:
    return tasks.get_task(pb.GetTaskRequest(id=task_id)).task.state


def test_unary_task_service_round_trip(tasks: TaskServiceClientSync, url: str) -> None:
    """Enqueue/GetTask work over Connect; errors arrive with the right codes and messages."""
    info = tasks.enqueue(pb.EnqueueRequest(type="e2e", queue="unary", payload=b"{}")).task
    assert info.state == S.TASK_STATE_PENDING
    assert tasks.get_task(pb.GetTaskRequest(id=info.id)).task.payload == b"{}"
    with pytest.raises(ConnectError) as missing:
        tasks.get_task(pb.GetTaskRequest(id="missing"))
    assert missing.value.code.name == "NOT_FOUND"
    with pytest.raises(ConnectError) as invalid:
        tasks.enqueue(pb.EnqueueRequest(type="t", priority=11))
    assert invalid.value.code.name == "INVALID_ARGUMENT"
    assert "priority must be in 0..9, got 11" in str(invalid.value)
    with pytest.raises(ConnectError) as dup:
        tasks.enqueue(pb.EnqueueRequest(type="t", task_id=info.id))
    assert dup.value.code.name == "ALREADY_EXISTS"
    admin = AdminServiceClientSync(url, send_compression=None)
    queues = {q.name: q for q in admin.list_queues(pb.ListQueuesRequest()).queues}
    assert queues["unary"].pending == 1


async def _open(url: str, protocol: str, queue: str, **hello: object) -> tuple[object, pb.Welcome]:
    stream = await open_session(url, TransportOptions(protocol=protocol))  # type: ignore[arg-type]
    await stream.send(pb.WorkerMessage(hello=pb.Hello(queues={queue: 1}, concurrency=2, **hello)))  # type: ignore[arg-type]
    first = await stream.recv()
    assert first is not None and first.WhichOneof("frame") == "welcome", first
    return stream, first.welcome


@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_session_dispatch_and_result(tasks: TaskServiceClientSync, url: str, protocol: str) -> None:
    """A worker session gets Welcome then Dispatch, and its SUCCESS Result completes the task."""
    queue = f"sess-{protocol}"
    info = tasks.enqueue(pb.EnqueueRequest(type="e2e", queue=queue, retention={"seconds": 60})).task

    async def main() -> None:
        stream, welcome = await _open(url, protocol, queue)
        assert welcome.lease_ttl.ToNanoseconds() == 2_000_000_000
        msg = await stream.recv()
        assert msg is not None and msg.dispatch.task.id == info.id
        await stream.send(
            pb.WorkerMessage(result=pb.Result(task_id=info.id, outcome=pb.TASK_OUTCOME_SUCCESS))
        )
        await asyncio.to_thread(wait_until, lambda: _state(tasks, info.id) == S.TASK_STATE_COMPLETED, 10)
        await stream.close_send()
        assert await stream.recv() is None
        await stream.aclose()

    asyncio.run(main())


def test_invalid_hello_fails_the_stream(url: str) -> None:
    """A Hello with concurrency 0 ends the stream with invalid_argument and the upstream message."""

    async def main() -> None:
        stream = await open_session(url, TransportOptions())
        await stream.send(pb.WorkerMessage(hello=pb.Hello(queues={"q": 1}, concurrency=0)))
        with pytest.raises(ConveyorError) as exc:
            await stream.recv()
        assert exc.value.code is Code.INVALID_ARGUMENT
        assert "concurrency must be positive, got 0" in exc.value.message
        await stream.aclose()

    asyncio.run(main())


def test_groups_and_scheduled_tasks_use_the_real_timers(tasks: TaskServiceClientSync, url: str) -> None:
    """The sweeper fires a group as one BatchDispatch and the promoter releases a scheduled task."""
    members = [
        tasks.enqueue(pb.EnqueueRequest(type="agg", queue="timers", group="g")).task.id for _ in range(2)
    ]
    later = tasks.enqueue(
        pb.EnqueueRequest(type="plain", queue="timers", process_in={"nanos": 300_000_000})
    ).task
    assert later.state == S.TASK_STATE_SCHEDULED

    async def main() -> None:
        stream, _ = await _open(url, "grpc", "timers", batch_types=["agg"])
        kinds: dict[str, list[str]] = {}
        async with asyncio.timeout(15):
            while len(kinds) < 2:
                msg = await stream.recv()
                assert msg is not None
                if msg.WhichOneof("frame") == "batch_dispatch":
                    kinds["batch"] = [t.id for t in msg.batch_dispatch.tasks]
                elif msg.WhichOneof("frame") == "dispatch":
                    kinds["single"] = [msg.dispatch.task.id]
        assert kinds == {"batch": members, "single": [later.id]}
        await stream.aclose()

    asyncio.run(main())


def test_watch_events_streams_over_connect(tasks: TaskServiceClientSync, url: str) -> None:
    """WatchEvents delivers TaskEvents for the watched queue as a server stream."""
    admin = AdminServiceClientSync(url, send_compression=None)
    got: list[tpb.TaskEvent] = []

    def consume() -> None:
        for event in admin.watch_events(pb.WatchEventsRequest(queues=["watched"])):
            got.append(event)
            if event.event_type == tpb.TASK_EVENT_TYPE_SCHEDULED:
                return

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    # The subscription starts asynchronously: keep producing until the first event shows up.
    wait_until(lambda: tasks.enqueue(pb.EnqueueRequest(type="w", queue="watched")) and got, 10)
    tasks.enqueue(pb.EnqueueRequest(type="w", queue="watched", process_in={"seconds": 60}))
    thread.join(10)
    assert not thread.is_alive()
    assert got[0].event_type == tpb.TASK_EVENT_TYPE_ENQUEUED and got[0].queue == "watched"
    assert got[-1].state == S.TASK_STATE_SCHEDULED


def test_times_and_hostile_options_over_the_wire(tasks: TaskServiceClientSync, url: str) -> None:
    """Over a real server: a process_at with nanoseconds comes back exactly; an expires_in whose instant
    leaves the Timestamp range is invalid_argument, commits nothing, and a session on its queue works."""
    at = {"seconds": 4_102_444_811, "nanos": 861_470_000}  # 2100-01-01T00:00:11.861470000Z
    info = tasks.enqueue(pb.EnqueueRequest(type="t", queue="hostile", process_at=at)).task
    got = tasks.get_task(pb.GetTaskRequest(id=info.id)).task.process_at
    assert (got.seconds, got.nanos) == (at["seconds"], at["nanos"])
    with pytest.raises(ConnectError) as bad:
        tasks.enqueue(pb.EnqueueRequest(type="t", queue="hostile", expires_in={"seconds": 315_576_000_000}))
    assert bad.value.code.name == "INVALID_ARGUMENT" and "expires_in" in str(bad.value)
    admin = AdminServiceClientSync(url, send_compression=None)
    listed = admin.list_tasks(pb.ListTasksRequest(queue="hostile")).tasks
    assert [t.id for t in listed] == [info.id]
    ready = tasks.enqueue(pb.EnqueueRequest(type="t", queue="hostile")).task

    async def main() -> None:
        stream, _ = await _open(url, "grpc", "hostile")
        msg = await stream.recv()
        assert msg is not None and msg.dispatch.task.id == ready.id
        await stream.aclose()

    asyncio.run(main())


def test_json_timestamps_round_trip_exactly(url: str) -> None:
    """Connect JSON: an RFC 3339 process_at with nine fractional digits comes back digit for digit."""
    at = "2100-01-01T00:00:11.861470001Z"
    with httpx.Client(base_url=url, timeout=10) as http:
        sent = http.post(
            "/conveyor.v1.TaskService/Enqueue",
            json={"type": "t", "queue": "json-times", "processAt": at},
        )
        assert sent.status_code == 200, sent.text
        assert sent.json()["task"]["processAt"] == at
        task_id = sent.json()["task"]["id"]
        got = http.post("/conveyor.v1.TaskService/GetTask", json={"id": task_id})
        assert got.json()["task"]["processAt"] == at
