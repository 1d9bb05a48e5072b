"""Pool planning, weight apportionment and weighted slot admission with lending."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conveyor_sdk._runtime.pools import PoolSpec, SlotBook, apportion, parse_pool, parse_queue, plan_pools


def test_parse_queue_accepts_name_and_weight() -> None:
    """NAME=WEIGHT parses; a bare NAME has weight 1."""
    assert parse_queue("critical=6") == ("critical", 6)
    assert parse_queue("low") == ("low", 1)


@pytest.mark.parametrize("text", ["bad name=1", "-x=1", "a=0", "a=-2", "a=x", "=3"])
def test_parse_queue_rejects_bad_names_and_weights(text: str) -> None:
    """Invalid queue names and non-positive or non-integer weights raise ValueError."""
    with pytest.raises(ValueError):
        parse_queue(text)


def test_parse_pool() -> None:
    """NAME:QUEUES:N parses into a PoolSpec; malformed ones raise."""
    assert parse_pool("slow:reports,exports:2") == PoolSpec("slow", ("reports", "exports"), 2)
    for bad in ("slow:reports", "slow::2", "slow:a:0", "slow:a:x", "s w:a:1"):
        with pytest.raises(ValueError):
            parse_pool(bad)


def test_plan_pools_gives_leftover_processes_to_default_pool() -> None:
    """Queues no --pool names share the default pool with the remaining processes (at least 1)."""
    plan = plan_pools(4, ["a", "b", "slow"], [PoolSpec("iso", ("slow",), 1)])
    assert plan == [PoolSpec("iso", ("slow",), 1), PoolSpec("default", ("a", "b"), 3)]
    assert plan_pools(1, ["a", "slow"], [PoolSpec("iso", ("slow",), 1)])[-1].processes == 1
    assert plan_pools(2, ["slow"], [PoolSpec("iso", ("slow",), 2)]) == [PoolSpec("iso", ("slow",), 2)]


def test_plan_pools_rejects_a_queue_in_two_pools() -> None:
    """A queue may belong to one pool only."""
    with pytest.raises(ValueError, match="both"):
        plan_pools(2, ["a"], [PoolSpec("x", ("a",), 1), PoolSpec("y", ("a",), 1)])


@given(st.integers(0, 200), st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 20), min_size=1))
def test_apportion_is_exact_and_proportional(total: int, weights: dict[str, int]) -> None:
    """Shares sum to the total and each is within one of its exact proportion."""
    shares = apportion(total, weights)
    assert sum(shares.values()) == total
    wsum = sum(weights.values())
    for key, weight in weights.items():
        assert abs(shares[key] - total * weight / wsum) < 1


def test_queue_under_quota_always_admitted() -> None:
    """critical=6 default=3 low=1 over 10 slots: quotas 6/3/1 and each may fill its own."""
    book = SlotBook({"critical": 6, "default": 3, "low": 1}, 10)
    assert book.quota == {"critical": 6, "default": 3, "low": 1}
    for _ in range(3):
        assert book.allows("default", 10, 0.0)
        book.acquire("default", "j")
    assert book.used["default"] == 3


def test_idle_slots_are_lent_when_nobody_waits() -> None:
    """A queue over its quota may borrow when the others have no waiting work."""
    book = SlotBook({"a": 1, "b": 1}, 4)
    for i in range(4):
        assert book.allows("a", 4 - i, 0.0)
        book.acquire("a", f"a{i}")
    assert book.used["a"] == 4


def test_borrowing_leaves_room_for_waiting_queues() -> None:
    """Once b has waiting work, a may not take the slots b is owed."""
    book = SlotBook({"a": 1, "b": 1}, 4)
    book.acquire("a", "a0")
    book.acquire("a", "a1")
    book.refused("b", "b0", 0.0)
    assert not book.allows("a", 2, 1.0)  # 2 free, b owed 2
    assert book.allows("b", 2, 1.0)
    book.acquire("b", "b0")
    assert book.waiting() == {}


def test_stale_demand_expires() -> None:
    """A waiting mark older than demand_ttl no longer reserves slots."""
    book = SlotBook({"a": 1, "b": 1}, 2, demand_ttl=5.0)
    book.acquire("a", "a0")
    book.refused("b", "b0", 0.0)
    assert not book.allows("a", 1, 1.0)
    assert book.allows("a", 1, 10.0)


def test_forget_drops_a_parked_job() -> None:
    """A parked job cancelled before starting stops reserving slots."""
    book = SlotBook({"a": 1, "b": 1}, 2)
    book.acquire("a", "a0")
    book.refused("b", "b0", 0.0)
    book.forget("b0")
    assert book.allows("a", 1, 0.0)
