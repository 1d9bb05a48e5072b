"""What each page shows, fetched through ``client.admin`` only (public conveyor.v1 RPCs).

Every function returns plain dicts/values for the templates and raises ConveyorError when the
server is unreachable or refuses the call (the app turns that into a banner).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from conveyor_cli.dashboard.events import EventFeed
from conveyor_cli.dashboard.history import chart
from conveyor_cli.dashboard.render import fragment, payload_preview, timeline
from conveyor_sdk.client import Client
from conveyor_sdk.types import TaskInfo, TaskState

__all__ = ["STATES", "QueueFilter", "cron", "overview", "queue_page", "task_detail", "workers"]

STATES = [s for s in TaskState if s is not TaskState.UNSPECIFIED]
SCAN_LIMIT = 2000  # tasks examined per request when a type/id filter is on (ListTasks cannot filter)
WAITING = {TaskState.SCHEDULED, TaskState.PENDING, TaskState.RETRY, TaskState.AGGREGATING, TaskState.BLOCKED}


async def overview(client: Client, feed: EventFeed) -> dict[str, Any]:
    """Queues with counts by state, pause flag, limits, recent throughput."""
    admin = client.admin
    queues, rates, concs = await asyncio.gather(
        admin.list_queues(), admin.list_rate_limits(), admin.list_concurrency_limits()
    )
    feed.history.depth(queues)
    rate_by = {r.queue: r for r in rates}
    conc_by = {c.queue: c for c in concs}
    throughput = feed.completed_per_minute()
    rows = [
        {
            "name": q.name,
            "paused": q.paused,
            # None where the server reports no count (conveyor.v1's QueueInfo has none for CANCELED)
            "counts": [q.counts.get(s) for s in STATES],
            "total": q.total,
            "rate": rate_by.get(q.name),
            "concurrency": conc_by.get(q.name),
            "per_minute": throughput.get(q.name, 0),
        }
        for q in queues
    ]
    return {"queues": rows, "states": STATES, "charts": charts(feed, "")}


def charts(feed: EventFeed, queue: str) -> Any:
    """The last hour of one queue (``""`` = all), done and failed per minute and waiting depth, as HTML.

    Rendered once per change of data or minute and reused by every page view until then: three
    60-point SVGs cost more to template than the rest of the overview, and they rarely change
    between two polls.
    """

    def build(series: dict[str, list[int | None]]) -> Any:
        return fragment("_charts.html", charts={name: chart(v) for name, v in series.items()})

    return feed.history.cached(queue, build)


@dataclass(frozen=True, slots=True)
class QueueFilter:
    """The queue page's filters; ``state`` None = every state."""

    state: TaskState | None = None
    type: str = ""
    id_prefix: str = ""
    page_token: str = ""

    @property
    def narrows(self) -> bool:
        """True when a filter must be applied here (the server filters by queue and state only)."""
        return bool(self.type or self.id_prefix)

    def keep(self, task: TaskInfo) -> bool:
        """Whether ``task`` passes the type and id-prefix filters."""
        return (not self.type or task.type == self.type) and task.id.startswith(self.id_prefix)


async def queue_page(
    client: Client, name: str, flt: QueueFilter, page_size: int, feed: EventFeed
) -> dict[str, Any]:
    """One page of a queue's tasks (newest first) plus the queue's counts."""
    admin = client.admin
    queues = await admin.list_queues()
    info = next((q for q in queues if q.name == name), None)
    tasks: list[TaskInfo] = []
    token, scanned = flt.page_token, 0
    while True:
        limit = min(1000, SCAN_LIMIT - scanned) if flt.narrows else page_size
        page = await admin.list_tasks(queue=name, state=flt.state, limit=limit, page_token=token)
        scanned += len(page.tasks)
        tasks += [t for t in page.tasks if flt.keep(t)]
        token = page.next_page_token
        if not token or not flt.narrows or len(tasks) >= page_size or scanned >= SCAN_LIMIT:
            break
    return {
        "name": name,
        "info": info,
        "counts": {s: (info.counts.get(s) if info else 0) for s in STATES},
        "tasks": tasks,
        "next_token": token,
        "scanned": scanned if flt.narrows else None,
        "states": STATES,
        "charts": charts(feed, name),
    }


async def task_detail(client: Client, id: str) -> dict[str, Any]:
    """Every field of one task, its payload preview and which actions apply in its state."""
    task = await client.get_task(id)
    return {
        "task": task,
        "preview": payload_preview(task.payload, task.content_type),
        "actions": actions_for(task.state),
        **timeline(task),
    }


def actions_for(state: TaskState) -> list[str]:
    """Operator actions that make sense in ``state`` (the server stays the judge)."""
    out = []
    if state in {TaskState.SCHEDULED, TaskState.RETRY, TaskState.ARCHIVED}:
        out.append("run")
    if state in WAITING or state is TaskState.ACTIVE:
        out.append("cancel")
    if state in WAITING:
        out += ["archive", "reschedule"]
    if state is not TaskState.ACTIVE:
        out.append("delete")
    return out


async def workers(client: Client) -> dict[str, Any]:
    """Connected worker sessions with their queue weights and in-flight tasks.

    conveyor.v1's ``WorkerSession`` has neither; the reference server publishes both per session in
    ``BrokerInfo.metrics`` (``session/<id>/in_flight``, ``session/<id>/weights``). Against a server
    that does not, weights come from ``name:weight`` queue entries when present and "in flight"
    falls back to the ACTIVE count of the session's queues (shared with other sessions; the page
    says so).
    """
    sessions, queues, info = await asyncio.gather(
        client.admin.list_sessions(), client.admin.list_queues(), client.admin.broker_info()
    )
    active = {q.name: q.counts.get(TaskState.ACTIVE, 0) for q in queues}
    metrics = info.metrics
    rows = []
    for s in sessions:
        exact = metrics.get(f"session/{s.id}/in_flight")
        weights = _weights(metrics.get(f"session/{s.id}/weights"))
        rows.append(
            {
                "session": s,
                "queues": [(name, weights.get(name, w)) for name, w in map(_queue_weight, s.queues)],
                "in_flight": int(exact) if exact and exact.isdigit() else _in_flight(s.queues, active),
                "exact": bool(exact and exact.isdigit()),
            }
        )
    return {"sessions": rows, "all_exact": all(r["exact"] for r in rows)}


def _weights(text: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        name, sep, weight = item.rpartition("=")
        if sep and name and weight.isdigit():
            out[name] = weight
    return out


def _queue_weight(entry: str) -> tuple[str, str]:
    name, sep, weight = entry.rpartition(":")
    if sep and weight.isdigit():
        return name, weight
    return entry, ""


def _in_flight(queues: tuple[str, ...], active: dict[str, int]) -> int:
    return sum(active.get(_queue_weight(q)[0], 0) for q in queues)


async def cron(client: Client) -> dict[str, Any]:
    """Every cron entry with its next fire time."""
    entries = sorted(await client.admin.list_cron(), key=lambda e: e.id)
    return {"entries": entries}
