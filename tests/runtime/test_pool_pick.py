"""Pool.pick takes the ready child with the most free slots, ties round-robin; Pool.free sums them."""

from __future__ import annotations

from conveyor_sdk._runtime.fleet import Pool
from conveyor_sdk._runtime.pools import PoolSpec
from conveyor_sdk._runtime.proc import ChildArgs, ChildProc, ChildState


def _pool(*busy: int, capacity: int = 3) -> Pool:
    pool = Pool(PoolSpec("p", ("q",), len(busy)), {"q": 1}, capacity)
    for index, running in enumerate(busy):
        child = ChildProc(index, "p", 0, ChildArgs(app="app:app", capacity=capacity), state=ChildState.READY)
        child.jobs = {f"j{index}-{n}": None for n in range(running)}  # type: ignore[misc]  # only counted
        pool.children.append(child)
    return pool


def test_most_free_slots_wins_and_ties_rotate() -> None:
    """The least-loaded child is picked; among equals the cursor moves on after each pick."""
    pool = _pool(2, 0, 1)
    assert pool.free() == 1 + 3 + 2
    picked = pool.pick()
    assert picked is not None and picked.index == 1
    even = _pool(0, 0)
    assert [c.index for c in (even.pick(), even.pick(), even.pick()) if c is not None] == [0, 1, 0]


def test_no_free_or_unready_child_gives_none() -> None:
    """Full children and children that are not READY count as no slot at all."""
    pool = _pool(3, 1)
    pool.children[1].state = ChildState.RETIRING
    assert pool.free() == 0
    assert pool.pick() is None
