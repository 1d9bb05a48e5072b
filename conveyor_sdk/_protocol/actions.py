"""Actions the session machine returns, and the outcome -> wire mapping it applies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._protocol.inflight import Delivery
from conveyor_sdk._protocol.types import CancelReason, OutcomeKind
from conveyor_sdk.errors import ConveyorError

__all__ = [
    "Abort",
    "Action",
    "Cancel",
    "CloseSend",
    "Notice",
    "OutcomeLike",
    "PlainOutcome",
    "Reconnect",
    "Send",
    "SessionStatistics",
    "Start",
    "Stop",
    "result_message",
    "wire_outcome",
]


# -- actions ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Send:
    """Write this frame to the stream."""

    message: pb.WorkerMessage


@dataclass(frozen=True, slots=True)
class Start:
    """Start executing a delivery. ``deadline`` = task-owned bound (epoch s) or None."""

    delivery: Delivery
    deadline: float | None


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel a running job (its result is still awaited via ``job_finished``)."""

    job_id: str
    reason: CancelReason


@dataclass(frozen=True, slots=True)
class CloseSend:
    """Half-close the request side; then keep reading until the server ends the stream."""


@dataclass(frozen=True, slots=True)
class Abort:
    """Tear the stream down now and report ``connection_lost(error)``."""

    error: ConveyorError


@dataclass(frozen=True, slots=True)
class Reconnect:
    """Open a new stream after ``delay`` seconds."""

    delay: float


@dataclass(frozen=True, slots=True)
class Stop:
    """The worker is done: ``error`` is None for a clean stop, else the fatal error."""

    error: ConveyorError | None


@dataclass(frozen=True, slots=True)
class Notice:
    """Something odd but tolerated happened (the caller may log it)."""

    message: str


Action = Send | Start | Cancel | CloseSend | Abort | Reconnect | Stop | Notice


class OutcomeLike(Protocol):
    """What an executor reports per task (``conveyor_sdk._worker.executor.Outcome``)."""

    @property
    def kind(self) -> int: ...
    @property
    def error_msg(self) -> str: ...
    @property
    def result(self) -> bytes: ...
    @property
    def cancelled(self) -> bool: ...


_CANCEL_TEXT = {CancelReason.DEADLINE: "deadline exceeded", CancelReason.SERVER_CANCEL: "canceled by server"}


def wire_outcome(outcome: OutcomeLike, reason: CancelReason | None) -> tuple[OutcomeKind, str, bytes]:
    """(kind, error_msg, result) to send. Cancelled outcomes resolve by the core's reason:
    DRAIN -> RELEASED, DEADLINE/SERVER_CANCEL -> RETRY; UNSPECIFIED is never sent (-> RELEASED)."""
    if outcome.cancelled:
        if reason is CancelReason.DRAIN:
            return OutcomeKind.RELEASED, "worker draining", b""
        if reason is None:
            return OutcomeKind.RETRY, outcome.error_msg or "canceled", b""
        return OutcomeKind.RETRY, _CANCEL_TEXT[reason], b""
    kind = outcome.kind
    if type(kind) is not OutcomeKind:  # a plain number (a member is its own OutcomeKind(...))
        try:
            kind = OutcomeKind(kind)
        except ValueError:
            kind = OutcomeKind.UNSPECIFIED
    if kind is OutcomeKind.UNSPECIFIED:
        return OutcomeKind.RELEASED, outcome.error_msg, b""
    return kind, outcome.error_msg, outcome.result if kind is OutcomeKind.SUCCESS else b""


def result_message(
    delivery: Delivery, outcomes: Sequence[OutcomeLike], reason: CancelReason | None
) -> tuple[pb.WorkerMessage, list[OutcomeKind]]:
    """The one answer to a delivery: a Result (Dispatch) or a BatchResult (BatchDispatch)."""
    msg = pb.WorkerMessage()
    if not delivery.batch and len(outcomes) == 1 == len(delivery.tasks):  # one per task finished
        kind, error_msg, result = wire_outcome(outcomes[0], reason)
        res = msg.result  # filled in place: no Result of its own to copy in
        res.task_id = delivery.tasks[0].id
        res.error_msg = error_msg
        res.result = result
        res.outcome = int(kind)  # type: ignore[assignment]  # enum fields accept their numbers
        return msg, [kind]
    results = []
    kinds = []
    for task, outcome in zip(delivery.tasks, outcomes, strict=True):
        kind, error_msg, result = wire_outcome(outcome, reason)
        res = pb.Result(task_id=task.id, error_msg=error_msg, result=result)
        res.outcome = int(kind)  # type: ignore[assignment]  # enum fields accept their numbers
        results.append(res)
        kinds.append(kind)
    if delivery.batch:
        msg.batch_result.results.extend(results)
    else:
        msg.result.CopyFrom(results[0])
    return msg, kinds


@dataclass(frozen=True, slots=True)
class PlainOutcome:
    kind: int
    error_msg: str = ""
    result: bytes = b""
    cancelled: bool = False


MISSING_OUTCOME = PlainOutcome(OutcomeKind.RETRY, "executor returned no outcome for this task")


@dataclass(frozen=True, slots=True)
class SessionStatistics:
    """Snapshot of the machine's counters."""

    phase: str
    draining: bool
    session_id: str
    server_version: str
    connections: int
    running: int
    parked: int
    in_flight_ids: int
    deliveries: int
    batches: int
    results: dict[str, int] = field(default_factory=dict)
    heartbeats: int = 0
    progress_sent: int = 0
    dropped_on_disconnect: int = 0
    reconnect_failures: int = 0
    held_before_welcome: int = 0  # frames read before a Welcome and handled after it
