"""``inflight.seconds``: Timestamp/Duration to float seconds without protobuf's Python helpers."""

from __future__ import annotations

import pytest
from google.protobuf import duration_pb2, timestamp_pb2

from conveyor_sdk._protocol.inflight import seconds


@pytest.mark.parametrize(
    ("secs", "nanos"),
    [(0, 0), (1, 1), (1_764_547_200, 123_456_789), (1_764_547_200, 999_999_999), (253402300799, 5)],
)
def test_timestamp_seconds_equal_protobufs_own_conversion(secs: int, nanos: int) -> None:
    ts = timestamp_pb2.Timestamp(seconds=secs, nanos=nanos)
    assert seconds(ts) == ts.ToNanoseconds() / 1e9


@pytest.mark.parametrize(("secs", "nanos"), [(0, 500_000_000), (30, 0), (-2, -500_000_000)])
def test_duration_seconds_equal_protobufs_own_conversion(secs: int, nanos: int) -> None:
    d = duration_pb2.Duration(seconds=secs, nanos=nanos)
    assert seconds(d) == d.ToNanoseconds() / 1e9


def test_a_timestamp_outside_protobufs_range_is_a_number_not_an_error() -> None:
    """A server's out-of-range deadline is taken as a time far away instead of failing the frame."""
    ts = timestamp_pb2.Timestamp(seconds=10**15, nanos=0)
    with pytest.raises(ValueError):
        ts.ToNanoseconds()
    assert seconds(ts) == 1e15
