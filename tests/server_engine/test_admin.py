"""AdminService in-process: queues, task actions and legal states, batch forms, paging, info RPCs."""

from __future__ import annotations

import asyncio

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import Code
from conveyor_server_min._engine.clock import NANOS
from tests.server_engine._harness import Worker, call, call_error, enqueue, get, make

S = tpb.TaskState


def test_list_queues_counts_states_sorted_with_pause_flag() -> None:
    """ListQueues lists queues with tasks or a pause flag, sorted, with per-state counts."""

    async def main() -> None:
        services, _ = make()
        await enqueue(services, queue="b")
        await enqueue(services, queue="b", process_in={"seconds": 60})
        await enqueue(services, queue="a", group="g")
        await call(services, "PauseQueue", pb.PauseQueueRequest(queue="c"))
        resp = await call(services, "ListQueues", pb.ListQueuesRequest())
        got = [(q.name, q.paused, q.pending, q.scheduled, q.aggregating) for q in resp.queues]
        assert got == [("a", False, 0, 0, 1), ("b", False, 1, 1, 0), ("c", True, 0, 0, 0)]
        for bad, message in (("", "queue name is required"), ("a b", 'invalid queue name "a b"')):
            err = await call_error(services, "PauseQueue", pb.PauseQueueRequest(queue=bad))
            assert (err.code, err.message) == (Code.INVALID_ARGUMENT, message)

    asyncio.run(main())


def test_list_tasks_filters_and_pages_by_descending_id() -> None:
    """ListTasks: id-descending pages, next_page_token only on a full page, queue/state filters."""

    async def main() -> None:
        services, _ = make()
        ids = [(await enqueue(services, queue="q" if i % 2 else "r")).id for i in range(7)]
        page1 = await call(services, "ListTasks", pb.ListTasksRequest(limit=3))
        assert [t.id for t in page1.tasks] == ids[::-1][:3]
        assert page1.next_page_token == ids[-3]
        page2 = await call(
            services, "ListTasks", pb.ListTasksRequest(limit=3, page_token=page1.next_page_token)
        )
        assert [t.id for t in page2.tasks] == ids[::-1][3:6]
        page3 = await call(
            services, "ListTasks", pb.ListTasksRequest(limit=3, page_token=page2.next_page_token)
        )
        assert ([t.id for t in page3.tasks], page3.next_page_token) == ([ids[0]], "")
        only_q = await call(services, "ListTasks", pb.ListTasksRequest(queue="q"))
        assert {t.queue for t in only_q.tasks} == {"q"} and len(only_q.tasks) == 3
        await call(services, "CancelTask", pb.CancelTaskRequest(id=ids[0]))
        canceled = await call(services, "ListTasks", pb.ListTasksRequest(state=S.TASK_STATE_CANCELED))
        assert [t.id for t in canceled.tasks] == [ids[0]]
        err = await call_error(services, "ListTasks", pb.ListTasksRequest(limit=-1))
        assert err.code is Code.INVALID_ARGUMENT

    asyncio.run(main())


def test_list_tasks_default_and_max_limit() -> None:
    """Limit 0 means 50; limits above 1000 are capped."""

    async def main() -> None:
        services, _ = make()
        batch = pb.EnqueueBatchRequest(tasks=[pb.EnqueueRequest(type="t")] * 1000)
        await call(services, "EnqueueBatch", batch)
        await call(services, "EnqueueBatch", pb.EnqueueBatchRequest(tasks=[pb.EnqueueRequest(type="t")] * 5))
        assert len((await call(services, "ListTasks", pb.ListTasksRequest())).tasks) == 50
        assert len((await call(services, "ListTasks", pb.ListTasksRequest(limit=5000))).tasks) == 1000

    asyncio.run(main())


def test_task_actions_and_legal_states() -> None:
    """Cancel/Run/Archive/Delete/Reschedule succeed in legal states and fail failed_precondition otherwise."""

    async def main() -> None:
        services, clock = make()
        await call(services, "PauseQueue", pb.PauseQueueRequest(queue="default"))
        t = await enqueue(services)
        await call(services, "ArchiveTask", pb.ArchiveTaskRequest(id=t.id))
        assert (await get(services, t.id)).state == S.TASK_STATE_ARCHIVED
        err = await call_error(services, "CancelTask", pb.CancelTaskRequest(id=t.id))
        assert err.code is Code.FAILED_PRECONDITION
        await call(services, "RunTask", pb.RunTaskRequest(id=t.id))
        assert (await get(services, t.id)).state == S.TASK_STATE_PENDING
        later = clock.now() // NANOS + 30
        await call(
            services, "RescheduleTask", pb.RescheduleTaskRequest(id=t.id, process_at={"seconds": later})
        )
        assert (await get(services, t.id)).state == S.TASK_STATE_SCHEDULED
        await call(services, "RescheduleTask", pb.RescheduleTaskRequest(id=t.id, process_in={"seconds": -1}))
        assert (await get(services, t.id)).state == S.TASK_STATE_PENDING
        both = pb.RescheduleTaskRequest(id=t.id, process_in={"seconds": 1}, process_at={"seconds": later})
        assert (await call_error(services, "RescheduleTask", both)).code is Code.INVALID_ARGUMENT
        await call(services, "CancelTask", pb.CancelTaskRequest(id=t.id))
        assert (await get(services, t.id)).state == S.TASK_STATE_CANCELED
        err = await call_error(services, "RunTask", pb.RunTaskRequest(id=t.id))
        assert err.code is Code.FAILED_PRECONDITION
        await call(services, "DeleteTask", pb.DeleteTaskRequest(id=t.id))
        assert (await call_error(services, "GetTask", pb.GetTaskRequest(id=t.id))).code is Code.NOT_FOUND
        for method, req in (
            ("DeleteTask", pb.DeleteTaskRequest(id=t.id)),
            ("RunTask", pb.RunTaskRequest(id="x")),
        ):
            assert (await call_error(services, method, req)).code is Code.NOT_FOUND
        assert (
            await call_error(services, "CancelTask", pb.CancelTaskRequest())
        ).message == "task id is required"

    asyncio.run(main())


def test_active_task_cannot_be_deleted_or_archived() -> None:
    """Delete and Archive of an ACTIVE task fail with failed_precondition."""

    async def main() -> None:
        services, _ = make()
        t = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        for method, req in (
            ("DeleteTask", pb.DeleteTaskRequest(id=t.id)),
            ("ArchiveTask", pb.ArchiveTaskRequest(id=t.id)),
        ):
            assert (await call_error(services, method, req)).code is Code.FAILED_PRECONDITION
        await w.close()

    asyncio.run(main())


def test_batch_actions_report_per_id_results() -> None:
    """Batch forms answer per id in order; BatchCancelTasks does not cancel ACTIVE tasks; bounds checked."""

    async def main() -> None:
        services, _ = make()
        active = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        waiting = await enqueue(services)
        resp = await call(
            services, "BatchCancelTasks", pb.BatchTasksRequest(ids=[waiting.id, active.id, "nope", ""])
        )
        assert [r.id for r in resp.results] == [waiting.id, active.id, "nope", ""]
        errors = [r.error for r in resp.results]
        assert errors[0] == "" and errors[1] and errors[2] == "broker: task not found"
        assert errors[3] == "task id is required"
        assert (await get(services, active.id)).state == S.TASK_STATE_ACTIVE
        run = await call(services, "BatchRunTasks", pb.BatchTasksRequest(ids=[waiting.id]))
        assert run.results[0].error
        assert (
            await call_error(services, "BatchDeleteTasks", pb.BatchTasksRequest())
        ).code is Code.INVALID_ARGUMENT
        too_many = pb.BatchTasksRequest(ids=["x"] * 1001)
        assert (await call_error(services, "BatchArchiveTasks", too_many)).code is Code.INVALID_ARGUMENT
        await w.close()

    asyncio.run(main())


def test_limit_rpcs_validate_and_list() -> None:
    """Rate and concurrency limits validate their inputs and are listed; deleting absent ones is OK."""

    async def main() -> None:
        services, _ = make()
        for rate, burst in ((0, 1), (float("inf"), 1), (1, 0)):
            req = pb.SetQueueRateLimitRequest(queue="q", rate_per_sec=rate, burst=burst)
            assert (await call_error(services, "SetQueueRateLimit", req)).code is Code.INVALID_ARGUMENT
        await call(
            services, "SetQueueRateLimit", pb.SetQueueRateLimitRequest(queue="q", rate_per_sec=5, burst=2)
        )
        rates = await call(services, "ListRateLimits", pb.ListRateLimitsRequest())
        assert [(r.queue, r.rate_per_sec, r.burst) for r in rates.limits] == [("q", 5.0, 2)]
        bad = pb.SetQueueConcurrencyLimitRequest(queue="q", max_active=0)
        assert (await call_error(services, "SetQueueConcurrencyLimit", bad)).code is Code.INVALID_ARGUMENT
        await call(
            services, "SetQueueConcurrencyLimit", pb.SetQueueConcurrencyLimitRequest(queue="q", max_active=3)
        )
        limits = await call(services, "ListConcurrencyLimits", pb.ListConcurrencyLimitsRequest())
        assert [(c.queue, c.max_active) for c in limits.limits] == [("q", 3)]
        await call(services, "DeleteQueueRateLimit", pb.DeleteQueueRateLimitRequest(queue="zz"))
        await call(services, "DeleteQueueConcurrencyLimit", pb.DeleteQueueConcurrencyLimitRequest(queue="zz"))

    asyncio.run(main())


def test_info_rpcs() -> None:
    """ClusterInfo lists this node; ListWorkerSessions the live sessions; BrokerInfo the memory driver."""

    async def main() -> None:
        services, _ = make()
        await enqueue(services)
        w = Worker(services)
        welcome = await w.open(queues={"b": 1, "a": 2}, concurrency=4, sdk_version="v1.2.3")
        sessions = await call(services, "ListWorkerSessions", pb.ListWorkerSessionsRequest())
        got = [(s.id, list(s.queues), s.concurrency, s.sdk_version) for s in sessions.sessions]
        assert got == [(welcome.session_id, ["a", "b"], 4, "v1.2.3")]
        cluster = await call(services, "ClusterInfo", pb.ClusterInfoRequest())
        assert len(cluster.nodes) == 1 and cluster.nodes[0].HasField("started_at")
        broker = await call(services, "BrokerInfo", pb.BrokerInfoRequest())
        assert (
            broker.driver == "memory" and broker.metrics["tasks"] == "1" and broker.metrics["pending"] == "1"
        )
        await w.close()
        sessions = await call(services, "ListWorkerSessions", pb.ListWorkerSessionsRequest())
        assert list(sessions.sessions) == []

    asyncio.run(main())


def test_unimplemented_rpcs_answer_promptly() -> None:
    """Webhook RPCs answer unimplemented at once."""

    async def main() -> None:
        services, _ = make()
        err = await call_error(services, "ListWebhookWorkers", pb.ListWebhookWorkersRequest())
        assert err.code is Code.UNIMPLEMENTED
        hb = await call_error(services, "/conveyor.v1.WebhookService/Heartbeat", pb.WebhookHeartbeatRequest())
        assert hb.code is Code.UNIMPLEMENTED

    asyncio.run(main())


def test_watch_events_streams_filtered_transitions() -> None:
    """WatchEvents yields TaskEvents for transitions, filtered by queue and event type, and ends on stop."""

    async def main() -> None:
        services, _ = make()
        watch = services.server_streams["/conveyor.v1.AdminService/WatchEvents"]
        req = pb.WatchEventsRequest(queues=["w"])
        events: list[tpb.TaskEvent] = []

        async def consume() -> None:
            async for event in watch.handler(req, None):  # type: ignore[arg-type]
                events.append(event)

        consumer = asyncio.ensure_future(consume())
        await asyncio.sleep(0)
        info = await enqueue(services, queue="w")
        await enqueue(services, queue="other")
        w = Worker(services)
        await w.open(queues={"w": 1})
        await w.dispatch()
        w.result(info.id)
        await w.settle()
        kinds = [e.event_type for e in events]
        assert kinds == [
            tpb.TASK_EVENT_TYPE_ENQUEUED,
            tpb.TASK_EVENT_TYPE_LEASED,
            tpb.TASK_EVENT_TYPE_COMPLETED,
        ]
        assert {e.id for e in events} == {info.id}
        await w.close()
        await services.stop()
        await asyncio.wait_for(consumer, 5)

    asyncio.run(main())
