"""Operator guard rails that warn without refusing (pre-configuring a queue is legitimate)."""

from __future__ import annotations

import fnmatch

from rich.markup import escape

from conveyor_cli._common import err_console
from conveyor_sdk._client.requests import queue_name
from conveyor_sdk.client import SyncClient

__all__ = ["queue_is_known", "warn_unknown_queue"]


def queue_is_known(client: SyncClient, queue: str) -> bool:
    """True when ``queue`` has tasks or a pause flag, or a connected worker session serves it."""
    if any(q.name == queue for q in client.admin.list_queues()):
        return True
    served = (name for s in client.admin.list_sessions() for name in s.queues)
    return any(name == queue or fnmatch.fnmatchcase(queue, name) for name in served)


def warn_unknown_queue(client: SyncClient, queue: str, action: str) -> None:
    """Print a warning on stderr when ``queue`` looks unknown (a typo?) but let ``action`` proceed.

    An invalid queue name raises ValidationError first (one ``error:`` line, no warning).
    """
    queue_name(queue)
    if not queue_is_known(client, queue):
        err_console.print(
            f"[yellow]warning:[/] queue {escape(queue)!r} has no tasks and no connected worker serves it "
            f"(a typo?); {escape(action)} anyway, as configuring a queue ahead of time is allowed",
            soft_wrap=True,
        )
