"""Run an :class:`~conveyor_sdk.app.App`'s real handlers against a real server: :class:`AppRunner`.

Enqueue through the app's typed definitions (``runner.enqueue(definition, payload, ...)``),
then ``await runner.run_until_idle()``: a real :class:`~conveyor_sdk.worker.Worker` serves
the app until every task enqueued through the runner is terminal (completed, archived or
cancelled), and the result lists one :class:`TaskResult` per task, in enqueue order.

Retries are real server retries. So that a test does not wait the server's backoff (seconds),
the runner enqueues with a fixed ``retry_backoff`` (10 ms) unless the call gives its own
``retry_policy``; pair it with a server started with a short ``--promote-interval``
(:func:`start_server` does).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, Unpack

from conveyor_sdk._client.options import EnqueueOptions
from conveyor_sdk.app import App, TaskDefinition
from conveyor_sdk.client import Client
from conveyor_sdk.types import RetryPolicy, RetryStrategy, TaskInfo, TaskState
from conveyor_sdk.worker import Worker
from conveyor_server_min.testing import ServerProcess

__all__ = ["AppRunner", "RunResult", "TaskResult", "start_server"]

_TERMINAL = frozenset({TaskState.COMPLETED, TaskState.ARCHIVED, TaskState.CANCELED})
SERVER_ARGS = ("--promote-interval", "10ms")


def start_server(args: Sequence[str] = ()) -> ServerProcess:
    """A started reference server on port 0 with a short retry promotion period (stop it yourself)."""
    server = ServerProcess([*SERVER_ARGS, *args])
    server.start()
    return server


@dataclass(frozen=True, slots=True)
class TaskResult:
    """How one task ended."""

    id: str
    type: str
    state: TaskState
    retried: int
    error: str

    @property
    def outcome(self) -> str:
        """``"completed"``, ``"archived"`` (failed for good) or ``"canceled"``."""
        return self.state.name.lower()

    @property
    def ok(self) -> bool:
        """True when the task completed."""
        return self.state is TaskState.COMPLETED


@dataclass(frozen=True, slots=True)
class RunResult:
    """Every task the runner enqueued, in enqueue order, once all were terminal."""

    tasks: tuple[TaskResult, ...]

    def __getitem__(self, task_id: str) -> TaskResult:
        """The result of ``task_id`` (KeyError when the runner did not enqueue it)."""
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def of_type(self, type_: str) -> tuple[TaskResult, ...]:
        """The results of every task of ``type_``."""
        return tuple(t for t in self.tasks if t.type == type_)

    @property
    def all_ok(self) -> bool:
        """True when every task completed."""
        return all(t.ok for t in self.tasks)


class AppRunner:
    """Serve ``app`` with a real worker against ``server`` (a URL) on demand. Async context manager."""

    def __init__(
        self,
        app: App,
        server: str,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 50,
        retry_backoff: float = 0.01,
    ) -> None:
        self.app = app
        self.server = server
        self.queues = tuple(queues) if queues else _app_queues(app)
        self.concurrency = concurrency
        self.retry_policy = RetryPolicy(RetryStrategy.FIXED, base=retry_backoff, max=retry_backoff)
        self.client = Client(server)
        self._ids: list[str] = []
        self._cancel_running: set[str] = set()

    async def __aenter__(self) -> Self:
        await self.client.__aenter__()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.client.__aexit__(et, ev, tb)

    def track(self, info: TaskInfo | str) -> None:
        """Have :meth:`run_until_idle` wait for a task enqueued some other way."""
        self._ids.append(info if isinstance(info, str) else info.id)

    async def enqueue(
        self, definition: TaskDefinition[Any, Any], payload: Any, /, **options: Unpack[EnqueueOptions]
    ) -> TaskInfo:
        """Enqueue through ``definition`` (validated, typed) and track the task."""
        options.setdefault("retry_policy", self.retry_policy)
        info = await definition.enqueue(self.client, payload, **options)
        self.track(info)
        return info

    async def cancel(self, task_id: str) -> None:
        """Cancel a task through the server now (a task not yet started ends ``canceled``)."""
        await self.client.admin.cancel_task(task_id)

    def cancel_when_started(self, task_id: str) -> None:
        """Cancel ``task_id`` during :meth:`run_until_idle`, once its handler is running."""
        self._cancel_running.add(task_id)

    async def run_until_idle(self, timeout: float = 30.0) -> RunResult:  # noqa: ASYNC109 (a test-facing limit)
        """Serve the app until every tracked task is terminal; TimeoutError after ``timeout`` s."""
        worker = Worker(
            self.server,
            queues=list(self.queues),
            concurrency=self.concurrency,
            grace=5.0,
            task_log=False,
            reconnect_base=0.05,
            reconnect_max=0.2,
        )
        serving = asyncio.create_task(worker.run(self.app))
        try:
            infos = await self._wait_terminal(serving, time.monotonic() + timeout)
        finally:
            worker.stop(immediate=True)
            await asyncio.wait_for(serving, 10.0)
        return RunResult(tuple(TaskResult(i.id, i.type, i.state, i.retried, i.last_error) for i in infos))

    async def _wait_terminal(self, serving: asyncio.Task[None], give_up: float) -> list[TaskInfo]:
        pending = list(dict.fromkeys(self._ids))
        done: dict[str, TaskInfo] = {}
        delay = 0.002
        while True:
            for task_id in pending:
                info = await self.client.get_task(task_id)
                if info.state in _TERMINAL:
                    done[task_id] = info
                elif info.state is TaskState.ACTIVE and task_id in self._cancel_running:
                    self._cancel_running.discard(task_id)
                    await self.cancel(task_id)
            pending = [t for t in pending if t not in done]
            if not pending:
                return [done[t] for t in dict.fromkeys(self._ids)]
            if serving.done():
                serving.result()  # a fatal worker error surfaces here
                raise RuntimeError("the worker stopped before the tasks were done")
            if time.monotonic() > give_up:
                raise TimeoutError(f"tasks still not finished: {', '.join(pending[:5])}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)


def _app_queues(app: App) -> tuple[str, ...]:
    queues = {d.defaults.get("queue") or "default" for d in app.definitions.values()}
    return tuple(sorted(queues))
