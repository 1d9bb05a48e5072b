"""The supervisor<->child pipe framing: round trips, split reads, garbage and size limits."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conveyor_sdk._runtime import pipe
from conveyor_sdk._worker.executor import Job, Outcome, OutcomeKind, TaskData
from conveyor_sdk.errors import ProtocolError


def _job(n: int = 2) -> Job:
    tasks = tuple(
        TaskData(
            id=f"t{i}", queue="q", type="ty", payload=bytes([i]) * 10, content_type="application/json",
            metadata={"k": str(i)}, retried=i, max_retry=3, enqueued_at=1.5, timeout=2.0, group="g",
        )
        for i in range(n)
    )  # fmt: skip
    return Job(job_id="batch:t0", queue="q", type="ty", tasks=tasks, batch=True, deadline=123.25)


def test_job_round_trips_through_a_frame() -> None:
    """A Job encoded as RunJob and decoded again is equal field by field."""
    job = _job()
    [msg] = pipe.FrameReader().feed(pipe.encode(pipe.job_to_msg(job)))
    assert isinstance(msg, pipe.RunJob)
    assert pipe.job_from_msg(msg) == job


def test_a_single_task_job_round_trips_through_a_frame() -> None:
    """A one-task Job (the child's shortcut without a comprehension) comes back equal too."""
    job = dataclasses.replace(_job(1), job_id="t0", batch=False)
    [msg] = pipe.FrameReader().feed(pipe.encode(pipe.job_to_msg(job)))
    assert isinstance(msg, pipe.RunJob)
    assert pipe.job_from_msg(msg) == job


def test_a_task_crosses_the_pipe_field_for_field() -> None:
    """TaskMsg mirrors TaskData name for name, in order (the child rebuilds TaskData positionally)."""
    assert pipe.TaskMsg.__struct_fields__ == tuple(f.name for f in dataclasses.fields(TaskData))


def test_outcomes_round_trip_and_unknown_kind_reads_as_retry() -> None:
    """Outcome fields survive; a kind number we do not know becomes RETRY."""
    out = Outcome(OutcomeKind.SKIP_RETRY, "bad", b"r", cancelled=True)
    assert pipe.outcome_from_msg(pipe.outcome_to_msg(out)) == out
    assert pipe.outcome_from_msg(pipe.OutcomeMsg(99)).kind is OutcomeKind.RETRY


def test_every_outcome_kind_and_field_survives_the_pipe() -> None:
    """Each kind round-trips; a success keeps its result bytes, traceback and cancelled flag."""
    for kind in OutcomeKind:
        for out in (
            Outcome(kind),
            Outcome(kind, result=b"r"),
            Outcome(kind, "why", cancelled=True),
            Outcome(kind, traceback="Traceback ..."),
        ):
            back = pipe.outcome_from_msg(pipe.outcome_to_msg(out))
            assert (back, back.traceback) == (out, out.traceback)


@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=20))
def test_frames_split_at_any_boundary_decode_in_order(cuts: list[int]) -> None:
    """Feeding the byte stream in arbitrary pieces yields the same messages in order."""
    messages: list[pipe.PipeMessage] = [
        pipe.Ready(1, ["a"], []),
        pipe.Beat(100, 2),
        pipe.Progress("t", 50, "half"),
        pipe.JobDone("t", [pipe.OutcomeMsg(1, "", b"x")], 0.5),
        pipe.Stop(),
        pipe.CancelJob("t", "deadline"),
    ]
    data = b"".join(pipe.encode(m) for m in messages)
    reader = pipe.FrameReader()
    got: list[pipe.PipeMessage] = []
    pos = 0
    for cut in cuts:
        got += reader.feed(data[pos : pos + cut])
        pos += cut
    got += reader.feed(data[pos:])
    assert got == messages
    assert reader.buffered == 0


def test_oversized_frame_is_a_protocol_error() -> None:
    """A length prefix above the limit is refused before buffering the body."""
    reader = pipe.FrameReader(max_frame=16)
    with pytest.raises(ProtocolError, match="exceeds"):
        reader.feed(b"\x00\x00\x01\x00")


def test_an_oversized_frame_read_whole_is_a_protocol_error() -> None:
    """The limit holds for a frame that arrives complete in one read, too (nothing buffered)."""
    reader = pipe.FrameReader(max_frame=4)
    with pytest.raises(ProtocolError, match="exceeds"):
        reader.feed(pipe.encode(pipe.Progress("t", 50, "half")))


def test_a_whole_frame_after_a_partial_one_waits_its_turn() -> None:
    """A read holding exactly one frame, while part of an earlier frame is buffered, is not
    taken for a lone frame: both come out, in order."""
    first, second = pipe.encode(pipe.Beat(1, 0)), pipe.encode(pipe.Stop())
    reader = pipe.FrameReader()
    assert reader.feed(first[:3]) == []
    assert reader.feed(first[3:] + second) == [pipe.Beat(1, 0), pipe.Stop()]
    assert reader.feed(first) == [pipe.Beat(1, 0)]
    assert reader.buffered == 0


def test_garbage_body_is_a_protocol_error() -> None:
    """A complete frame whose body is not a known message raises ProtocolError."""
    with pytest.raises(ProtocolError, match="undecodable"):
        pipe.FrameReader().feed(b"\x00\x00\x00\x02\x91\x01")
