"""The answer to a delivery: a Dispatch's Result and a BatchResult carry each outcome as the wire says."""

from __future__ import annotations

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk._protocol.actions import PlainOutcome, result_message
from conveyor_sdk._protocol.inflight import delivery_from_envelopes
from conveyor_sdk._protocol.types import CancelReason, OutcomeKind

CASES = [  # (outcome, the core's cancel reason) -> (kind, error_msg, result) on the wire
    (PlainOutcome(OutcomeKind.SUCCESS, result=b"\x01r"), None, (OutcomeKind.SUCCESS, "", b"\x01r")),
    (PlainOutcome(OutcomeKind.RETRY, "boom", b"dropped"), None, (OutcomeKind.RETRY, "boom", b"")),
    (PlainOutcome(OutcomeKind.SKIP_RETRY, "final"), None, (OutcomeKind.SKIP_RETRY, "final", b"")),
    (
        PlainOutcome(OutcomeKind.RETRY, cancelled=True),
        CancelReason.DRAIN,
        (OutcomeKind.RELEASED, "worker draining", b""),
    ),
    (
        PlainOutcome(OutcomeKind.RETRY, cancelled=True),
        CancelReason.DEADLINE,
        (OutcomeKind.RETRY, "deadline exceeded", b""),
    ),
    (PlainOutcome(OutcomeKind.UNSPECIFIED, "?"), None, (OutcomeKind.RELEASED, "?", b"")),
    (PlainOutcome(2, "a plain number"), None, (OutcomeKind.RETRY, "a plain number", b"")),
    (PlainOutcome(99, "no such kind"), None, (OutcomeKind.RELEASED, "no such kind", b"")),
]


def _expected(task_id: str, kind: OutcomeKind, error_msg: str, result: bytes) -> pb.Result:
    return pb.Result(task_id=task_id, outcome=int(kind), error_msg=error_msg, result=result)  # type: ignore[arg-type]


@pytest.mark.parametrize(("outcome", "reason", "wire"), CASES)
def test_one_dispatch_one_result(
    outcome: PlainOutcome, reason: CancelReason | None, wire: tuple[OutcomeKind, str, bytes]
) -> None:
    """A Dispatch is answered by one Result with its task id, outcome, error and result bytes."""
    env = tpb.TaskEnvelope(id="T1", queue="q", type="t")
    delivery = delivery_from_envelopes((env,), batch=False, group="", now=0.0)
    msg, kinds = result_message(delivery, [outcome], reason)
    assert msg == pb.WorkerMessage(result=_expected("T1", *wire))
    assert kinds == [wire[0]]


def test_a_batch_gets_one_result_per_member_in_order() -> None:
    """A BatchDispatch is answered by one BatchResult holding each member's Result, in delivery order."""
    envs = tuple(tpb.TaskEnvelope(id=f"T{i}", queue="q", type="t") for i in range(len(CASES)))
    delivery = delivery_from_envelopes(envs, batch=True, group="g", now=0.0)
    msg, kinds = result_message(delivery, [case[0] for case in CASES], CancelReason.DEADLINE)
    wires = [case[2] if case[1] in (None, CancelReason.DEADLINE) else CASES[4][2] for case in CASES]
    expected = pb.WorkerMessage()
    expected.batch_result.results.extend(_expected(f"T{i}", *w) for i, w in enumerate(wires))
    assert msg == expected
    assert kinds == [w[0] for w in wires]


def test_outcomes_must_match_the_tasks() -> None:
    """One outcome per task: a short or long list is refused, not answered in part."""
    env = tpb.TaskEnvelope(id="T1", queue="q", type="t")
    delivery = delivery_from_envelopes((env,), batch=False, group="", now=0.0)
    ok = PlainOutcome(OutcomeKind.SUCCESS)
    for outcomes in ([], [ok, ok]):
        with pytest.raises(ValueError):
            result_message(delivery, outcomes, None)
