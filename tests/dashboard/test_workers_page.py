"""The workers page: each session's queue weights and its own in-flight count, from a real worker."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx

from conveyor_cli.dashboard import views
from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import TaskState
from conveyor_sdk.worker import Registry
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.cli_client._helpers import uid
from tests.cli_client._worker import worker_thread

Factory = Callable[..., ServerProcess]


def _in_flight(client: SyncClient) -> dict[str, str]:
    metrics = client.admin.broker_info().metrics
    return {k: v for k, v in metrics.items() if k.endswith("/in_flight")}


def test_session_row_shows_weights_and_its_own_in_flight(server_factory: Factory) -> None:
    """Two tasks held by the worker: its row says 2 in flight, and weights 3 and 1 for its queues."""
    server = server_factory(module="conveyor_cli.server_cmd")  # `conveyor server`: it has the dashboard
    heavy, light = uid("wq"), uid("wq")
    release = threading.Event()
    reg = Registry()

    @reg.handler("hold")
    def hold(task: Any, ctx: Any) -> None:
        release.wait(30)

    with SyncClient(server.url) as client, worker_thread(server.url, reg, {heavy: 3, light: 1}):
        for _ in range(2):
            client.enqueue("hold", None, queue=heavy)
        wait_until(lambda: list(_in_flight(client).values()) == ["2"], 20, what="2 tasks in flight")
        session = client.admin.list_sessions()[0]
        weights = client.admin.broker_info().metrics[f"session/{session.id}/weights"]
        assert weights == ",".join(sorted([f"{heavy}=3", f"{light}=1"]))
        html = httpx.get(server.url + "/workers", timeout=20).text
        release.set()
    row = re.search(rf"<tr>\s*<td class=\"mono\">{re.escape(session.id)}</td>(.*?)</tr>", html, re.S)
    assert row is not None, html
    cells = row.group(1)
    assert f"{heavy}</a> (3)" in cells and f"{light}</a> (1)" in cells
    assert 'data-in-flight="2">2</td>' in cells  # exact: no "*" fallback marker
    assert "does not publish per-session counts" not in html


def test_fallback_without_session_metrics() -> None:
    """Against a server that publishes nothing per session (upstream), the queues' ACTIVE count is
    shown instead, with name:weight entries still read; the template then explains the figure."""
    session = SimpleNamespace(id="S1", queues=("a:2", "b"))
    queues = [
        SimpleNamespace(name="a", counts={TaskState.ACTIVE: 4}),
        SimpleNamespace(name="b", counts={TaskState.ACTIVE: 1}),
    ]

    async def sessions() -> list[Any]:
        return [session]

    async def list_queues() -> list[Any]:
        return queues

    async def broker_info() -> Any:
        return SimpleNamespace(metrics={"tasks": "5"})

    admin = SimpleNamespace(list_sessions=sessions, list_queues=list_queues, broker_info=broker_info)
    page = asyncio.run(views.workers(SimpleNamespace(admin=admin)))  # type: ignore[arg-type]
    (row,) = page["sessions"]
    assert row["queues"] == [("a", "2"), ("b", "")]
    assert row["in_flight"] == 5 and not row["exact"] and not page["all_exact"]
