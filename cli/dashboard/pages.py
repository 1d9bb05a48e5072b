"""Search and the limits page (rate limits, concurrency limits, group settings), read side."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from conveyor_sdk.client import Client
from conveyor_sdk.errors import ConveyorError, NotFound
from conveyor_sdk.types import TaskInfo, TaskState

__all__ = ["Search", "limits", "search"]

SEARCH_SCAN = 5000  # tasks examined per search (ListTasks filters by queue and state only)
SEARCH_SHOW = 100


@dataclass(frozen=True, slots=True)
class Search:
    """``q``: a task id or id prefix; ``type``: exact task type; ``state``: None = any."""

    q: str = ""
    type: str = ""
    state: TaskState | None = None

    @property
    def empty(self) -> bool:
        """No criterion given: show the form only."""
        return not (self.q or self.type or self.state)

    def keep(self, task: TaskInfo) -> bool:
        """Whether ``task`` matches the id prefix and type."""
        return task.id.startswith(self.q) and (not self.type or task.type == self.type)


async def search(client: Client, s: Search) -> dict[str, Any]:
    """Tasks of every queue matching ``s``; an exact id is looked up directly first."""
    out: dict[str, Any] = {"search": s, "results": [], "scanned": 0, "capped": False}
    if s.empty:
        return out
    if s.q:
        try:
            task = await client.get_task(s.q)
        except NotFound:
            pass
        except ConveyorError as exc:  # an id the server refuses to parse is not a match, nothing else
            if exc.code.connect_name != "invalid_argument":
                raise
        else:
            if s.keep(task) and (s.state is None or task.state is s.state):
                out["results"] = [task]
                return out
    token, results, scanned = "", [], 0
    while scanned < SEARCH_SCAN and len(results) < SEARCH_SHOW:
        page = await client.admin.list_tasks(state=s.state, limit=1000, page_token=token)
        scanned += len(page.tasks)
        results += [t for t in page.tasks if s.keep(t)]
        token = page.next_page_token
        if not token:
            break
    out.update(results=results[:SEARCH_SHOW], scanned=scanned, capped=bool(token))
    return out


async def limits(client: Client) -> dict[str, Any]:
    """Every rate limit, concurrency limit and group setting, and the known queue names."""
    admin = client.admin
    rates, concs, groups, queues = await asyncio.gather(
        admin.list_rate_limits(),
        admin.list_concurrency_limits(),
        admin.list_group_configs(),
        admin.list_queues(),
    )
    return {
        "rates": sorted(rates, key=lambda r: r.queue),
        "concs": sorted(concs, key=lambda c: c.queue),
        "groups": sorted(groups, key=lambda g: (g.queue, g.group)),
        "queue_names": [q.name for q in queues],
    }
