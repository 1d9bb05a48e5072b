"""The live terminal view (``rich.live``) shown when stderr is a TTY."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from conveyor_sdk._runtime.supervisor import Supervisor

__all__ = ["render", "run_live"]


def _children_table(sup: Supervisor) -> Table:
    table = Table(title="processes", expand=False, show_edge=False)
    for col in ("child", "pid", "state", "running", "done", "RSS MiB", "age s"):
        table.add_column(col, justify="right" if col not in ("child", "state") else "left")
    if sup.executor is None:
        table.add_row("(in-process)", "-", "-", "-", "-", "-", "-")
        return table
    now = time.monotonic()
    for child in sup.executor.children():
        table.add_row(
            child.name,
            str(child.pid),
            child.state.value,
            str(len(child.jobs)),
            str(child.tasks_done),
            f"{child.rss / (1 << 20):.0f}",
            f"{now - child.started_at:.0f}",
        )
    return table


def render(sup: Supervisor) -> Group:
    """One frame of the view."""
    m = sup.metrics
    queues = Table(title="in flight per queue", show_edge=False)
    queues.add_column("queue")
    queues.add_column("in flight", justify="right")
    queues.add_column("weight", justify="right")
    for queue, weight in sup.config.queues.items():
        queues.add_row(queue, str(m.in_flight.get(queue, 0)), str(weight))
    restarts = sum(m.restarts.values())
    head = Text.assemble(
        ("conveyor worker ", "bold"),
        (f"{sup.config.app} ", "cyan"),
        f"-> {sup.server_url}   ",
        (f"{m.rate():.1f} tasks/s", "green"),
        f"   failures {m.failures}   restarts {restarts}",
    )
    return Group(head, _children_table(sup), queues)


async def run_live(sup: Supervisor, interval: float = 0.5) -> None:
    """Refresh the view until cancelled."""
    console = Console(stderr=True)
    with Live(render(sup), console=console, refresh_per_second=4, transient=False) as live:
        while True:
            await asyncio.sleep(interval)
            live.update(render(sup))
