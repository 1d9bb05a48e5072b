"""Client-assigned task ids: ULIDs that strictly increase within a process, unique across threads."""

from __future__ import annotations

import threading

from conveyor_sdk._client.ids import new_task_id

CROCKFORD = set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")


def test_ids_are_ulids_in_the_order_they_were_drawn() -> None:
    """Thousands drawn within the same milliseconds still sort in drawing order (a listing by id
    shows a producer's tasks as it sent them)."""
    ids = [new_task_id() for _ in range(20_000)]
    assert all(len(i) == 26 and set(i) <= CROCKFORD for i in ids)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_threads_never_draw_the_same_id() -> None:
    """Four threads drawing at once: every id distinct, each thread's own ids increasing."""
    drawn: list[list[str]] = [[] for _ in range(4)]

    def draw(out: list[str]) -> None:
        out.extend(new_task_id() for _ in range(5_000))

    threads = [threading.Thread(target=draw, args=(out,)) for out in drawn]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    every = [i for out in drawn for i in out]
    assert len(every) == 20_000 and len(set(every)) == 20_000
    assert all(out == sorted(out) for out in drawn)
