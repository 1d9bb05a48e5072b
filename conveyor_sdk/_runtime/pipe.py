"""Sans-I/O pipe protocol between the supervisor and its child processes.

Rules:

* A frame is a 4-byte big-endian length followed by one msgpack-encoded,
  tagged msgspec Struct (``PipeMessage``). Only plain fields cross: strings,
  ints, floats, bytes, lists and string maps. Nothing is pickled, so a child
  can never make the supervisor execute code by what it sends.
* Supervisor -> child: :class:`RunJob`, :class:`CancelJob`, :class:`Stop`.
* Child -> supervisor: :class:`Ready` (once, after importing the app),
  :class:`ImportFailed` (instead of Ready, then exit), :class:`JobDone`,
  :class:`Progress`, :class:`Beat` (liveness, every ``beat_interval``),
  :class:`MetricsReport` (custom metrics that changed: before the ``JobDone`` of
  the job that changed them, with a beat, and before the child exits).
* Every ``RunJob`` is answered by exactly one ``JobDone`` unless the child
  dies; the supervisor turns a death into outcomes itself.
* A frame longer than :data:`MAX_FRAME` is a protocol error by the peer.

This module does no I/O and reads no clock: :class:`FrameReader` turns bytes
into messages; :func:`encode` turns a message into bytes.
"""

from __future__ import annotations

import dataclasses
import operator
import struct

import msgspec

from conveyor_sdk._worker._build import new_job, new_task_data
from conveyor_sdk._worker.executor import Job, Outcome, OutcomeKind, TaskData
from conveyor_sdk.errors import ProtocolError

__all__ = [
    "MAX_FRAME",
    "Beat",
    "CancelJob",
    "FrameReader",
    "ImportFailed",
    "JobDone",
    "MetricFamilyMsg",
    "MetricsReport",
    "OutcomeMsg",
    "PipeMessage",
    "Progress",
    "Ready",
    "RunJob",
    "Stop",
    "TaskMsg",
    "encode",
    "job_from_msg",
    "job_to_msg",
    "outcome_from_msg",
    "outcome_to_msg",
]

MAX_FRAME = 64 << 20  # payloads are <= 1 MiB; batches of 1000 fit comfortably
_HEADER = struct.Struct(">I")


class TaskMsg(msgspec.Struct, array_like=True, frozen=True):
    """One task as it crosses the pipe (mirrors :class:`TaskData`)."""

    id: str
    queue: str
    type: str
    payload: bytes
    content_type: str
    metadata: dict[str, str]
    retried: int
    max_retry: int
    enqueued_at: float | None = None
    timeout: float | None = None
    task_deadline: float | None = None
    group: str = ""
    process_at: float | None = None


class OutcomeMsg(msgspec.Struct, array_like=True, frozen=True):
    """One task outcome (mirrors :class:`Outcome`)."""

    kind: int
    error_msg: str = ""
    result: bytes = b""
    cancelled: bool = False
    traceback: str = ""  # for the supervisor's log (never sent to the server)


class RunJob(msgspec.Struct, tag_field="k", tag="run", array_like=True, frozen=True):
    """Supervisor -> child: execute a job."""

    job_id: str
    queue: str
    type: str
    tasks: list[TaskMsg]
    batch: bool
    deadline: float | None


class CancelJob(msgspec.Struct, tag_field="k", tag="cancel", array_like=True, frozen=True):
    """Supervisor -> child: cooperatively cancel a job (reason is a CancelReason value)."""

    job_id: str
    reason: str


class Stop(msgspec.Struct, tag_field="k", tag="stop", array_like=True, frozen=True):
    """Supervisor -> child: accept nothing more; exit once running jobs are done."""


class Ready(msgspec.Struct, tag_field="k", tag="ready", array_like=True, frozen=True):
    """Child -> supervisor: the app is imported and the child accepts jobs."""

    pid: int
    types: list[str]
    sync_types: list[str]


class ImportFailed(msgspec.Struct, tag_field="k", tag="import-failed", array_like=True, frozen=True):
    """Child -> supervisor: the app could not be loaded; the child exits next."""

    message: str
    detail: str = ""  # the traceback, limited to the user's frames


class JobDone(msgspec.Struct, tag_field="k", tag="done", array_like=True, frozen=True):
    """Child -> supervisor: one outcome per task of the job, in job order."""

    job_id: str
    outcomes: list[OutcomeMsg]
    duration: float


class Progress(msgspec.Struct, tag_field="k", tag="progress", array_like=True, frozen=True):
    """Child -> supervisor: progress reported by handler code."""

    task_id: str
    percent: int
    message: str


class Beat(msgspec.Struct, tag_field="k", tag="beat", array_like=True, frozen=True):
    """Child -> supervisor: the child's event loop is alive; ``rss`` in bytes (0 if unknown)."""

    rss: int
    running: int


class MetricFamilyMsg(msgspec.Struct, array_like=True, frozen=True):
    """A custom metric's declaration (see ``mstore.Family``), sent once per child."""

    name: str
    kind: str
    help: str
    labels: list[str]
    buckets: list[float]
    mode: str


class MetricsReport(msgspec.Struct, tag_field="k", tag="metrics", array_like=True, frozen=True):
    """Child -> supervisor: cumulative cells of the custom series that changed (see ``mstore.py``).

    ``samples``: (name, label values, cell); ``dropped``: series the child refused past its cap.
    """

    families: list[MetricFamilyMsg]
    samples: list[tuple[str, list[str], list[float]]]
    dropped: int


PipeMessage = RunJob | CancelJob | Stop | Ready | ImportFailed | JobDone | Progress | Beat | MetricsReport

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[PipeMessage] = msgspec.msgpack.Decoder(PipeMessage)


def encode(message: PipeMessage) -> bytes:
    """Length-prefixed frame for ``message``."""
    body = _encoder.encode(message)
    return _HEADER.pack(len(body)) + body


class FrameReader:
    """Accumulates bytes from a pipe and yields complete messages."""

    __slots__ = ("_buf", "_max")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> list[PipeMessage]:
        """Add ``data``; return every message now complete. Raises ProtocolError on garbage."""
        if not self._buf and len(data) > 4:  # the usual read: one whole frame, nothing held
            (size,) = _HEADER.unpack_from(data)
            if size == len(data) - 4 and size <= self._max:
                try:
                    return [_decoder.decode(memoryview(data)[4:])]
                except msgspec.DecodeError as exc:
                    raise ProtocolError(f"undecodable pipe frame: {exc}") from None
        self._buf += data
        out: list[PipeMessage] = []
        view = self._buf
        pos = 0
        while len(view) - pos >= 4:
            (size,) = _HEADER.unpack_from(view, pos)
            if size > self._max:
                raise ProtocolError(f"pipe frame of {size} bytes exceeds the {self._max} byte limit")
            if len(view) - pos - 4 < size:
                break
            body = bytes(view[pos + 4 : pos + 4 + size])
            pos += 4 + size
            try:
                out.append(_decoder.decode(body))
            except msgspec.DecodeError as exc:
                raise ProtocolError(f"undecodable pipe frame: {exc}") from None
        if pos:
            del self._buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        """Bytes held waiting for the rest of a frame."""
        return len(self._buf)


# TaskData's fields in declaration order, read off a TaskMsg (same names, same order): the
# positional arguments new_task_data takes.
_task_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(TaskData)))


def job_to_msg(job: Job) -> RunJob:
    """The :class:`RunJob` frame for ``job``."""
    tasks = [
        TaskMsg(
            t.id,
            t.queue,
            t.type,
            t.payload,
            t.content_type,
            dict(t.metadata),
            t.retried,
            t.max_retry,
            t.enqueued_at,
            t.timeout,
            t.task_deadline,
            t.group,
            t.process_at,
        )
        for t in job.tasks
    ]
    return RunJob(job.job_id, job.queue, job.type, tasks, job.batch, job.deadline)


def job_from_msg(msg: RunJob) -> Job:
    """Rebuild the :class:`Job` a child runs from its frame."""
    if len(msg.tasks) == 1:  # a single task (most jobs): no comprehension to run
        tasks: tuple[TaskData, ...] = (new_task_data(*_task_fields(msg.tasks[0])),)
    else:
        tasks = tuple([new_task_data(*_task_fields(t)) for t in msg.tasks])
    return new_job(msg.job_id, msg.queue, msg.type, tasks, msg.batch, msg.deadline)


def outcome_to_msg(outcome: Outcome) -> OutcomeMsg:
    """Frame form of one outcome."""
    return OutcomeMsg(
        int(outcome.kind), outcome.error_msg, outcome.result, outcome.cancelled, outcome.traceback
    )


_KINDS = {int(kind): kind for kind in OutcomeKind}
_SUCCESS = Outcome(OutcomeKind.SUCCESS)  # frozen: one instance serves every plain success


def outcome_from_msg(msg: OutcomeMsg) -> Outcome:
    """Outcome from its frame form; an unknown kind is read defensively as RETRY."""
    kind = _KINDS.get(msg.kind, OutcomeKind.RETRY)
    if kind is OutcomeKind.SUCCESS and not (msg.error_msg or msg.result or msg.cancelled or msg.traceback):
        return _SUCCESS  # the supervisor reads one per finished task
    return Outcome(
        kind=kind,
        error_msg=msg.error_msg,
        result=msg.result,
        cancelled=msg.cancelled,
        traceback=msg.traceback,
    )
