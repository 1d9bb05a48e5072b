"""Small helpers shared by check modules."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from google.protobuf import duration_pb2, timestamp_pb2

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb

if TYPE_CHECKING:
    from conveyor_conformance._session import RawSession
    from conveyor_conformance.context import CheckContext

__all__ = [
    "ARCHIVED",
    "CANCELED",
    "COMPLETED",
    "PENDING",
    "RELEASED",
    "RETRY",
    "SKIP_RETRY",
    "SUCCESS",
    "ULID",
    "dur",
    "expect_free_redelivery",
    "seconds",
    "state_is",
    "ts",
]

SUCCESS = pb.TASK_OUTCOME_SUCCESS
RETRY = pb.TASK_OUTCOME_RETRY
SKIP_RETRY = pb.TASK_OUTCOME_SKIP_RETRY
RELEASED = pb.TASK_OUTCOME_RELEASED

PENDING = tpb.TASK_STATE_PENDING
COMPLETED = tpb.TASK_STATE_COMPLETED
ARCHIVED = tpb.TASK_STATE_ARCHIVED
CANCELED = tpb.TASK_STATE_CANCELED

ULID = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")


def dur(seconds_: float) -> duration_pb2.Duration:
    """A Duration of ``seconds_``."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds_ * 1e9))
    return d


def ts(epoch: float) -> timestamp_pb2.Timestamp:
    """A Timestamp at ``epoch`` seconds."""
    t = timestamp_pb2.Timestamp()
    t.FromNanoseconds(round(epoch * 1e9))
    return t


def seconds(value: Any) -> float:
    """Seconds in a Duration or Timestamp message."""
    return float(value.ToNanoseconds()) / 1e9


def state_is(*states: int) -> Any:
    """Predicate for ``wait_task``: the task is in one of ``states``."""
    return lambda info: info.state in states


async def expect_free_redelivery(ctx: CheckContext, sess: RawSession, task_id: str, what: str) -> None:
    """The next frame on ``sess`` redelivers ``task_id`` as a plain Dispatch with no retry charged."""
    again = await sess.expect("dispatch", ctx.t(10))
    got = again.dispatch.task
    ctx.expect(got.id == task_id, f"{what}: redelivered {got.id or 'nothing'}, expected {task_id}")
    ctx.expect(got.retried == 0, f"{what} charged a retry: retried {got.retried}")
