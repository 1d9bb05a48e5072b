"""Client-assigned task ids for EnqueueBatch and EnqueueTx, and what a repeat of them answers.

Every item without a ``task_id`` gets a ULID before the request is sealed and sent, so a
call repeated on ``unavailable`` (on the same or another server address) cannot create a
second task. How a repeat of an id that committed meanwhile is answered: EnqueueTx re-commits
it as a no-op on both servers (protocol §6.1). EnqueueBatch items: upstream conveyord echoes
the request as if it were new (server-behavior.md §15.1, as for Enqueue), the reference
server answers the item ``task ID already exists``. After a repeat (more than one attempt
reached a server) such an item is read back with GetTask and, when it is plausibly ours (same
type and queue), reported as committed. On the first attempt that reached a server a duplicate
is a taken id and stays an error. Pure helpers: the clients do the calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from conveyor_sdk._client.ids import new_task_id
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

__all__ = ["duplicates", "plausibly_ours", "repeated", "with_ids"]


def with_ids(items: list[pb.EnqueueRequest]) -> list[pb.EnqueueRequest]:
    """Give every item without ``task_id`` a fresh ULID (in place); returns ``items``."""
    for item in items:
        if not item.task_id:
            item.task_id = new_task_id()
    return items


def repeated(sent: Sequence[int]) -> bool:
    """Whether the call that just answered was sent more than once (``sent``: the caller's report)."""
    return bool(sent) and sent[0] > 1


def duplicates(items: Sequence[pb.EnqueueRequest], results: Sequence[pb.EnqueueResult]) -> list[int]:
    """Indexes of batch items the server refused as an existing id."""
    return [
        i
        for i, (item, res) in enumerate(zip(items, results, strict=False))
        if res.error and "already exists" in res.error and item.task_id in res.error
    ]


def plausibly_ours(item: pb.EnqueueRequest, stored: pb.TaskInfo) -> bool:
    """The stored task is the one this item committed on an earlier attempt (same type and queue)."""
    return stored.type == item.type and stored.queue == (item.queue or "default")
