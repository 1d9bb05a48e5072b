"""Pool planning and weight apportionment (the quota rule itself: tests/sdk_protocol/test_quota.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conveyor_sdk._runtime.pools import PoolSpec, apportion, parse_pool, parse_queue, plan_pools


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
