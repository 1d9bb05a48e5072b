"""The live terminal view (``rich.live``) shown when stderr is a TTY."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from conveyor_sdk._runtime.executor import ProcessExecutor
from conveyor_sdk._runtime.metrics import Metrics

__all__ = ["LiveSource", "render", "run_live"]


class _LiveConfig(Protocol):
    @property
    def app(self) -> str: ...

    @property
    def queues(self) -> Mapping[str, int]: ...


class LiveSource(Protocol):
    """What the view reads (the supervisor is one; a protocol so this module does not import it)."""

    @property
    def config(self) -> _LiveConfig: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def executor(self) -> ProcessExecutor | None: ...

    @property
    def server_url(self) -> str: ...

    @property
    def workers(self) -> Mapping[str, Any]: ...

    def in_flight(self) -> dict[str, tuple[int, int]]: ...


def _children_table(sup: LiveSource) -> Table:
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


def _pools_table(sup: LiveSource) -> Table:
    """One row per pool: its session, capacity (= the session's concurrency), running and parked."""
    table = Table(title="pools (one session each)", show_edge=False)
    for col in ("pool", "queues", "session", "capacity", "running", "parked"):
        table.add_column(col, justify="right" if col in ("capacity", "running", "parked") else "left")
    for name, worker in sup.workers.items():
        counts = worker.in_flight_by_queue().values()
        table.add_row(
            name,
            ",".join(worker.queues),
            worker.phase,
            str(worker.concurrency),
            str(sum(r for r, _ in counts)),
            str(sum(p for _, p in counts)),
        )
    return table


def _queues_table(sup: LiveSource) -> Table:
    """One row per queue; ``in flight`` = running + parked, the number the server counts."""
    table = Table(title="in flight per queue", show_edge=False)
    for col in ("queue", "pool", "weight", "running", "parked", "in flight"):
        table.add_column(col, justify="left" if col in ("queue", "pool") else "right")
    pool_of = {q: name for name, w in sup.workers.items() for q in w.queues}
    in_flight = sup.in_flight()
    for queue, weight in sup.config.queues.items():
        running, parked = in_flight.get(queue, (0, 0))
        table.add_row(
            queue, pool_of.get(queue, "-"), str(weight), str(running), str(parked), str(running + parked)
        )
    return table


def render(sup: LiveSource) -> Group:
    """One frame of the view."""
    m = sup.metrics
    restarts = sum(m.restarts.values())
    head = Text.assemble(
        ("conveyor worker ", "bold"),
        (f"{sup.config.app} ", "cyan"),
        f"-> {sup.server_url}   ",
        (f"{m.rate():.1f} tasks/s", "green"),
        f"   failures {m.failures}   restarts {restarts}",
    )
    return Group(head, _children_table(sup), _pools_table(sup), _queues_table(sup))


async def run_live(sup: LiveSource, interval: float = 0.5) -> None:
    """Refresh the view until cancelled."""
    console = Console(stderr=True)
    with Live(render(sup), console=console, refresh_per_second=4, transient=False) as live:
        while True:
            await asyncio.sleep(interval)
            live.update(render(sup))
