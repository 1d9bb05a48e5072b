"""depends_on in-process: BLOCKED until prerequisites succeed; failure policies BLOCK / CASCADE / CONTINUE."""

from __future__ import annotations

import asyncio

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_server_min._engine.clock import NANOS
from tests.server_engine._harness import Worker, call, enqueue, get, make

S = tpb.TaskState
P = tpb.DependencyFailurePolicy
O = pb.TaskOutcome  # noqa: E741
BLOCK, CASCADE, CONTINUE = (
    P.DEPENDENCY_FAILURE_POLICY_BLOCK,
    P.DEPENDENCY_FAILURE_POLICY_CASCADE_CANCEL,
    P.DEPENDENCY_FAILURE_POLICY_CONTINUE,
)


def _dep(task_id: str, policy: int = P.DEPENDENCY_FAILURE_POLICY_UNSPECIFIED) -> tpb.TaskDependency:
    return tpb.TaskDependency(task_id=task_id, on_failure=policy)


def test_dependent_is_blocked_until_prerequisite_succeeds() -> None:
    """A dependent is BLOCKED (not leased) until its prerequisite completes, then becomes PENDING."""

    async def main() -> None:
        services, _ = make()
        parent = await enqueue(services, queue="p")
        child = await enqueue(services, depends_on=[_dep(parent.id)])
        assert child.state == S.TASK_STATE_BLOCKED
        w = Worker(services)
        await w.open(queues={"p": 1, "default": 1}, concurrency=5)
        assert (await w.dispatch()).task.id == parent.id
        await w.settle()
        assert w.pending() == []
        w.result(parent.id)
        assert (await w.dispatch()).task.id == child.id
        await w.close()

    asyncio.run(main())


def test_failure_policies_on_terminal_failure() -> None:
    """Prerequisite archived: BLOCK stays blocked, CONTINUE proceeds, CASCADE_CANCEL cancels recursively."""

    async def main() -> None:
        services, _ = make()
        await call(services, "PauseQueue", pb.PauseQueueRequest(queue="default"))
        parent = await enqueue(services)
        block = await enqueue(services, depends_on=[_dep(parent.id, BLOCK)])
        cont = await enqueue(services, depends_on=[_dep(parent.id, CONTINUE)])
        cascade = await enqueue(services, depends_on=[_dep(parent.id, CASCADE)])
        grandchild = await enqueue(services, depends_on=[_dep(cascade.id, CASCADE)])
        await call(services, "ArchiveTask", pb.ArchiveTaskRequest(id=parent.id))
        assert (await get(services, block.id)).state == S.TASK_STATE_BLOCKED
        assert (await get(services, cont.id)).state == S.TASK_STATE_PENDING
        for task_id in (cascade.id, grandchild.id):
            task = await get(services, task_id)
            assert (task.state, task.last_error) == (S.TASK_STATE_CANCELED, "canceled by failed dependency")

    asyncio.run(main())


def test_dependencies_resolved_at_enqueue() -> None:
    """Already-completed prerequisites are satisfied; already-failed ones apply their policy at once."""

    async def main() -> None:
        services, _ = make()
        done = await enqueue(services)
        w = Worker(services)
        await w.open()
        await w.dispatch()
        w.result(done.id)
        await w.settle()
        await w.close()
        failed = await enqueue(services, queue="x")
        await call(services, "ArchiveTask", pb.ArchiveTaskRequest(id=failed.id))
        ready = await enqueue(services, queue="y", depends_on=[_dep(done.id)])
        assert ready.state == S.TASK_STATE_PENDING
        canceled = await enqueue(services, queue="y", depends_on=[_dep(failed.id, CASCADE)])
        assert canceled.state == S.TASK_STATE_CANCELED
        proceed = await enqueue(services, queue="y", depends_on=[_dep(failed.id, CONTINUE)])
        assert proceed.state == S.TASK_STATE_PENDING
        blocked = await enqueue(services, queue="y", depends_on=[_dep(failed.id), _dep("never-enqueued")])
        assert blocked.state == S.TASK_STATE_BLOCKED

    asyncio.run(main())


def test_unblocked_dependent_with_future_process_at_is_scheduled() -> None:
    """A dependent whose prerequisites finish before its process_at becomes SCHEDULED, not PENDING."""

    async def main() -> None:
        services, clock = make()
        await call(services, "PauseQueue", pb.PauseQueueRequest(queue="default"))
        parent = await enqueue(services, queue="p")
        later = clock.now() // NANOS + 100
        child = await enqueue(services, depends_on=[_dep(parent.id)], process_at={"seconds": later})
        w = Worker(services)
        await w.open(queues={"p": 1})
        await w.dispatch()
        w.result(parent.id, O.TASK_OUTCOME_SUCCESS)
        await w.settle()
        assert (await get(services, child.id)).state == S.TASK_STATE_SCHEDULED
        await w.close()

    asyncio.run(main())
