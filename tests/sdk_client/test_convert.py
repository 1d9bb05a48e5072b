"""Wire Timestamps become the same aware UTC datetimes as protobuf's own ``ToDatetime`` makes."""

from __future__ import annotations

from datetime import UTC

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given
from hypothesis import strategies as st

from conveyor_sdk._client.convert import timestamp
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

SECONDS = st.integers(-62135596800, 253402300799)
NANOS = st.integers(0, 999_999_999)


@given(seconds=SECONDS, nanos=NANOS)
def test_timestamp_matches_protobuf(seconds: int, nanos: int) -> None:
    """Any valid Timestamp converts exactly as ``ToDatetime(tzinfo=UTC)`` does, zone included."""
    info = pb.TaskInfo()
    info.enqueued_at.seconds, info.enqueued_at.nanos = seconds, nanos
    ours = timestamp(info, "enqueued_at")
    theirs = Timestamp(seconds=seconds, nanos=nanos).ToDatetime(tzinfo=UTC)
    assert ours == theirs and ours is not None and ours.tzinfo is theirs.tzinfo


@pytest.mark.parametrize(
    ("seconds", "nanos"), [(-62135596801, 0), (253402300800, 0), (0, -1), (0, 1_000_000_000)]
)
def test_timestamp_out_of_range_raises_as_protobuf(seconds: int, nanos: int) -> None:
    """Outside protobuf's range the conversion fails with protobuf's own error."""
    info = pb.TaskInfo()
    info.enqueued_at.seconds, info.enqueued_at.nanos = seconds, nanos
    with pytest.raises(ValueError, match="Timestamp is not valid"):
        timestamp(info, "enqueued_at")


def test_unset_timestamp_is_none() -> None:
    """An unset field is ``None``, not the epoch."""
    assert timestamp(pb.TaskInfo(), "started_at") is None
