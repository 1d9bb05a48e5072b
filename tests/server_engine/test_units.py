"""Pure engine pieces: ULIDs, Go-semver rules, backoff, SWRR, token bucket, cron specs."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections import Counter

import pytest

from conveyor_server_min._engine import ulid as ulid_module
from conveyor_server_min._engine.backoff import backoff_delay
from conveyor_server_min._engine.clock import MAX_INSTANT, NANOS, FakeClock
from conveyor_server_min._engine.cronspec import parse_cron
from conveyor_server_min._engine.limits import TokenBucket
from conveyor_server_min._engine.sessions import swrr_pick
from conveyor_server_min._engine.ulid import UlidGenerator, encode_ulid
from conveyor_server_min._services import semver


def test_ulids_are_26_chars_time_prefixed_and_monotonic() -> None:
    """Same-millisecond ids increase; a later clock gives a larger prefix; the alphabet is Crockford."""
    clock = FakeClock(1_800_000_000 * NANOS)
    gen = UlidGenerator(clock, entropy=lambda n: b"\xff" * n)
    a, b = gen.new(), gen.new()
    assert len(a) == 26 and a < b
    assert set(a) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
    clock.advance(0.001)
    c = gen.new()
    assert c > b and c[:10] > a[:10]
    clock.advance(-10)  # clock steps back: still increasing
    assert gen.new() > c


@pytest.mark.parametrize(
    ("text", "valid"),
    [("v1.2.3", True), ("v1", True), ("v1.2", True), ("v0.0.0-0", True), ("v1.2.3-rc.1+build.5", True),
     ("1.2.3", False), ("devel", False), ("conveyor-py/0.1.0", False), ("v01.2.3", False),
     ("v1.2-rc1", False), ("", False), ("v1.2.3-01", False)],
)  # fmt: skip
def test_go_semver_validity(text: str, valid: bool) -> None:
    """Go x/mod/semver validity: the v prefix is required; v1 / v1.2 are shorthands."""
    assert semver.is_semver(text) is valid


def test_go_semver_ordering() -> None:
    """Prereleases sort before releases; numeric identifiers numerically, before alphanumeric ones."""
    ordered = ["v0.0.0-0", "v0.0.0", "v1.0.0-alpha", "v1.0.0-alpha.1", "v1.0.0-alpha.beta", "v1.0.0-beta.2",
               "v1.0.0-beta.11", "v1.0.0-rc.1", "v1.0.0", "v1.2", "v1.10.0", "v2"]  # fmt: skip
    for lo, hi in itertools.pairwise(ordered):
        assert semver.compare(lo, hi) == -1, (lo, hi)
        assert semver.compare(hi, lo) == 1
    assert semver.compare("v1", "v1.0.0") == 0
    assert semver.compare("v1.0.0+a", "v1.0.0+b") == 0


def test_backoff_strategies() -> None:
    """Exponential and linear use full jitter under a capped ceiling; fixed is exact; zero ceiling gives 0."""
    half = lambda: 0.5  # noqa: E731
    assert backoff_delay("exponential", 2, 900, 0, half) == 1.0
    assert backoff_delay("exponential", 2, 900, 4, half) == 16.0
    assert backoff_delay("exponential", 2, 900, 200, half) == 450.0
    assert backoff_delay("linear", 2, 900, 2, half) == 3.0
    assert backoff_delay("fixed", 7, 5, 9, half) == 5
    assert backoff_delay("exponential", 0, 900, 3, half) == 0.0


def test_swrr_is_smooth_and_proportional() -> None:
    """Weights 5:1:1 give the classic smooth sequence and exact proportions over a cycle."""
    current: dict[str, int] = {}
    picks = [swrr_pick(current, [("a", 5), ("b", 1), ("c", 1)]) for _ in range(7)]
    assert picks == ["a", "a", "b", "a", "c", "a", "a"]
    counts = Counter(swrr_pick(current, [("x", 3), ("y", 1)]) for _ in range(400))
    assert counts == {"x": 300, "y": 100}


def test_token_bucket_refills_at_rate_up_to_burst() -> None:
    """A bucket starts full, spends whole tokens, refills at its rate and never beyond burst."""
    bucket = TokenBucket(rate=4, burst=2)
    assert bucket.available(0)
    bucket.take(0)
    bucket.take(0)
    assert not bucket.available(0)
    assert bucket.next_token_at() == NANOS // 4
    assert not bucket.available(NANOS // 4 - 1)
    assert bucket.available(NANOS // 4)
    bucket.refill(100 * NANOS)
    assert bucket.tokens == 2
    slow = TokenBucket(rate=1e-300, burst=1)
    slow.take(0)
    assert slow.next_token_at() == MAX_INSTANT  # not an OverflowError in the middle of a dispatch


def _utc(ts: int | None) -> dt.datetime:
    assert ts is not None and ts % NANOS == 0
    return dt.datetime.fromtimestamp(ts // NANOS, dt.UTC)


def test_cron_next_fire_times() -> None:
    """Six-field seconds-first specs, names, steps, dom/dow, descriptors and @every compute the next fire."""
    now = int(dt.datetime(2027, 1, 15, 8, 0, 0, tzinfo=dt.UTC).timestamp()) * NANOS  # a Friday
    assert _utc(parse_cron("0 0 2 * * *").next_after(now)) == dt.datetime(2027, 1, 16, 2, tzinfo=dt.UTC)
    assert parse_cron("*/15 * * * * *").next_after(now) == now + 15 * NANOS
    assert _utc(parse_cron("0 30 9 * * MON-FRI").next_after(now)).hour == 9
    assert _utc(parse_cron("0 0 0 * * SAT").next_after(now)).day == 16
    assert _utc(parse_cron("0 0 0 29 FEB ?").next_after(now)) == dt.datetime(2028, 2, 29, tzinfo=dt.UTC)
    assert _utc(parse_cron("@hourly").next_after(now)) == dt.datetime(2027, 1, 15, 9, tzinfo=dt.UTC)
    assert parse_cron("@every 90s").next_after(now) == now + 90 * NANOS


@pytest.mark.parametrize(
    "spec",
    [
        "* * * * *",
        "61 * * * * *",
        "0 0 25 * * *",
        "x * * * * *",
        "*/0 * * * * *",
        "",
        "@every inf",
        "@every 400000000000s",
        "@every 0s",
    ],
)
def test_cron_rejects_bad_specs(spec: str) -> None:
    """Five-field, out-of-range and malformed specs are rejected."""
    with pytest.raises(ValueError):
        parse_cron(spec)


def test_broker_compacts_stale_heap_entries() -> None:
    """Canceling many waiting tasks of an unserved queue leaves no unbounded garbage after a reap."""
    from conveyor_server_min._engine.engine import Engine
    from conveyor_server_min._engine.model import State, Task

    engine = Engine(clock=FakeClock())
    for i in range(500):
        engine.enqueue(Task(id=f"x{i:04d}", queue="idle", type="t", enqueued_at=0))
    for i in range(499):
        task = engine.get(f"x{i:04d}")
        assert task is not None
        engine.transitions.move(task, State.CANCELED, engine.now())
    engine.reap()
    heap = engine.broker._ready["idle"]  # type: ignore[attr-defined]
    assert len(heap) == 1
    assert engine.broker.peek_ready("idle", engine.now()).id == "x0499"  # type: ignore[union-attr]


def test_ulid_encoding_is_crockford_base32_of_the_128_bits() -> None:
    """encode_ulid writes the value as 26 five-bit digits, most significant first (two leading zero bits)."""
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    rng = random.Random(7)
    for value in [
        0,
        1,
        (1 << 128) - 1,
        1 << 127,
        *(rng.getrandbits(rng.randint(1, 128)) for _ in range(500)),
    ]:
        expected = "".join(alphabet[(value >> (5 * i)) & 31] for i in range(25, -1, -1))
        assert encode_ulid(value) == expected


def test_ulid_entropy_is_fetched_in_bulk_never_reused_and_dropped_after_fork() -> None:
    """Each id takes its own 10 random bytes from one bulk fetch; a forked child fetches afresh."""
    fetched: list[int] = []
    counter = itertools.count()

    def entropy(n: int) -> bytes:
        fetched.append(n)
        return b"".join(next(counter).to_bytes(10, "big") for _ in range(n // 10))

    clock = FakeClock(1_800_000_000 * NANOS)
    gen = UlidGenerator(clock, entropy=entropy)
    tails = []
    for _ in range(300):
        clock.advance(0.001)  # a new millisecond: the random part is the fetched bytes
        gen.new()
        tails.append(gen._last & ((1 << 80) - 1))
    assert len(fetched) == 2 and fetched[0] >= 10 * 256
    assert tails == list(range(300))  # consecutive, non-overlapping 10-byte slices, none reused
    ulid_module._forked()  # what os.register_at_fork runs in a child
    clock.advance(0.001)
    gen.new()
    assert len(fetched) == 3
