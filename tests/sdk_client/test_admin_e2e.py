"""client.admin against the real reference server: task actions, listing, queues, sessions.

The async admin meets it in-process over in-memory connections, the blocking one over a socket."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.errors import FailedPrecondition, InvalidArgument, NotFound
from conveyor_sdk.testing.memory import MemoryServer
from conveyor_sdk.types import TaskState


def uid(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_task_actions_move_states(memory: Callable[..., MemoryServer]) -> None:
    """cancel, archive, run, reschedule and delete change state as the protocol says."""

    async def main() -> None:
        async with memory() as server, server.client() as client:
            queue = uid()
            later = await client.enqueue("t", queue=queue, process_in=3600)
            await client.admin.run_task(later.id)
            assert (await client.get_task(later.id)).state is TaskState.PENDING
            await client.admin.reschedule_task(later.id, process_at=datetime.now(UTC) + timedelta(hours=2))
            assert (await client.get_task(later.id)).state is TaskState.SCHEDULED
            await client.admin.archive_task(later.id)
            assert (await client.get_task(later.id)).state is TaskState.ARCHIVED
            await client.admin.run_task(later.id)
            assert (await client.get_task(later.id)).state is TaskState.PENDING
            await client.admin.cancel_task(later.id)
            assert (await client.get_task(later.id)).state is TaskState.CANCELED
            with pytest.raises(FailedPrecondition):
                await client.admin.archive_task(later.id)
            await client.admin.delete_task(later.id)
            with pytest.raises(NotFound):
                await client.get_task(later.id)
            with pytest.raises(NotFound):
                await client.admin.cancel_task(later.id)

    asyncio.run(main())


def test_list_tasks_filters_and_pages(memory: Callable[..., MemoryServer]) -> None:
    """list_tasks filters by queue and state; iter_tasks follows page tokens."""

    async def main() -> None:
        async with memory() as server, server.client() as client:
            queue = uid()
            ids = [(await client.enqueue("t", {"i": i}, queue=queue)).id for i in range(5)]
            delayed = await client.enqueue("t", queue=queue, process_in=600)
            page = await client.admin.list_tasks(queue=queue, state="pending", limit=2)
            assert len(page.tasks) == 2 and page.next_page_token
            everything = [
                t.id async for t in client.admin.iter_tasks(queue=queue, state=TaskState.PENDING, page_size=2)
            ]
            assert sorted(everything) == sorted(ids)
            scheduled = await client.admin.list_tasks(queue=queue, state=TaskState.SCHEDULED)
            assert [t.id for t in scheduled.tasks] == [delayed.id]

    asyncio.run(main())


def test_batch_actions_report_per_id(url: str) -> None:
    """Batch cancel returns one result per id with an error only for the unknown one."""
    with SyncClient(url) as client:
        queue = uid()
        a, b = client.enqueue("t", queue=queue), client.enqueue("t", queue=queue)
        results = client.admin.batch("cancel", [a.id, "no-such-id", b.id])
        assert [r.id for r in results] == [a.id, "no-such-id", b.id]
        assert [bool(r.error) for r in results] == [False, True, False]
        assert client.get_task(b.id).state is TaskState.CANCELED
        with pytest.raises(ValueError, match="unknown batch action"):
            client.admin.batch("explode", [a.id])  # type: ignore[arg-type]


def test_queues_pause_resume_and_counts(url: str) -> None:
    """Queues list with per-state counts; pause/resume flip the flag; bad names are refused locally."""
    with SyncClient(url) as client:
        queue = uid()
        client.enqueue("t", queue=queue)
        client.enqueue("t", queue=queue, process_in=600)
        client.admin.pause_queue(queue)
        row = next(q for q in client.admin.list_queues() if q.name == queue)
        assert row.paused and row.counts[TaskState.PENDING] == 1 and row.counts[TaskState.SCHEDULED] == 1
        assert row.total == 2
        client.admin.resume_queue(queue)
        assert not next(q for q in client.admin.list_queues() if q.name == queue).paused
        with pytest.raises(InvalidArgument, match="invalid queue name"):
            client.admin.pause_queue("bad queue")


def test_list_sessions_without_workers(url: str) -> None:
    """With no worker connected the session list is empty (and typed)."""
    with SyncClient(url) as client:
        assert client.admin.list_sessions() == []
