"""The expected verdict against conveyord, and checks that accept every order the protocol allows."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conveyor_conformance import CheckFailed, CheckResult, Status, default_registry
from conveyor_conformance.checks.server_enqueue import _run_dependency_tasks
from conveyor_conformance.upstream import (
    KNOWN_DIFFERENCES,
    NOT_APPLICABLE,
    OPTIONAL_ABSENT,
    expected_status,
    verdict_problems,
)
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb


def test_known_differences_are_exactly_the_annotated_checks() -> None:
    """Every check with a divergence note is listed with its §15 item, and the note names that item."""
    annotated = {c.id: c.divergence for c in default_registry() if c.divergence}
    assert set(annotated) == set(KNOWN_DIFFERENCES)
    for check_id, section in KNOWN_DIFFERENCES.items():
        assert annotated[check_id].startswith(f"§{section}:"), annotated[check_id]
    assert "§5.1" in annotated["server.5.3.welcome-before-any-dispatch"]
    assert "§5.3" in annotated["server.5.3.welcome-before-any-dispatch"]
    assert {c.id for c in default_registry()} >= NOT_APPLICABLE


def test_optional_behaviours_conveyord_lacks_are_optional_checks() -> None:
    """Each listed optional check exists, is optional, and is expected optional-fail under both profiles."""
    reg = default_registry()
    for check_id in OPTIONAL_ABSENT:
        assert reg.get(check_id).optional, check_id
        assert expected_status(check_id, "strict") is Status.OPTIONAL_FAIL
        assert expected_status(check_id, "upstream") is Status.OPTIONAL_FAIL
    assert not set(OPTIONAL_ABSENT) & set(KNOWN_DIFFERENCES)
    passing = [_result(check_id, Status.PASS) for check_id in OPTIONAL_ABSENT]
    assert set(verdict_problems(passing, "upstream")) == set(OPTIONAL_ABSENT)  # a change upstream shows


def _result(check_id: str, status: Status, divergence: str = "") -> CheckResult:
    return CheckResult(check_id, "x", "x", "server", status, detail="d", divergence=divergence)


def test_verdict_problems_names_each_deviation_from_the_expected_verdict() -> None:
    """A difference that passes, an unexpected failure and a note without its section are each reported."""
    order = "server.5.3.welcome-before-any-dispatch"
    note = default_registry().get(order).divergence
    assert expected_status(order, "strict") is Status.FAIL
    assert expected_status(order, "upstream") is Status.DIVERGENCE
    assert expected_status("server.2.valid-token-accepted", with_token=True) is Status.PASS
    good = [_result(order, Status.DIVERGENCE, note), _result("server.6.2.get-task-errors", Status.PASS)]
    assert verdict_problems(good, "upstream") == {}
    bad = [
        _result(order, Status.PASS),
        _result("server.6.2.get-task-errors", Status.FAIL),
        _result("server.6.1.task-id-idempotent", Status.DIVERGENCE, "no section"),
    ]
    got = verdict_problems(bad, "upstream")
    assert got[order].startswith("got pass, want divergence")
    assert got["server.6.2.get-task-errors"].startswith("got fail, want pass")
    assert "does not name §15.1" in got["server.6.1.task-id-idempotent"]


class _ScriptedDispatches:
    """Plays the dispatches a server chose, in order, and records the Results sent back."""

    def __init__(self, ids: list[str]) -> None:
        self._ids = list(ids)
        self.results: list[tuple[str, int]] = []

    async def expect(self, kind: str, within: float) -> pb.ServerMessage:
        assert kind == "dispatch" and self._ids, "the check asked for more dispatches than scripted"
        task_id = self._ids.pop(0)
        return pb.ServerMessage(dispatch=pb.Dispatch(task=tpb.TaskEnvelope(id=task_id, type="t")))

    async def result(self, task_id: str, outcome: int, error_msg: str = "") -> None:
        self.results.append((task_id, outcome))


class _Ctx:
    @staticmethod
    def t(seconds: float) -> float:
        return seconds

    @staticmethod
    def expect(condition: object, message: str) -> None:
        if not condition:
            raise CheckFailed(message)


def _run(order: list[str]) -> tuple[list[str], _ScriptedDispatches]:
    sess = _ScriptedDispatches(order)
    ctx: Any = _Ctx()
    names = asyncio.run(_run_dependency_tasks(ctx, sess, "first", "after", "pre"))  # type: ignore[arg-type]
    return names, sess


@pytest.mark.parametrize(
    "order",
    [["first", "pre", "after"], ["first", "after", "pre"], ["pre", "first", "after"]],
)
def test_dependencies_check_accepts_every_legal_order(order: list[str]) -> None:
    """The dependent may come any time after its prerequisite's SUCCESS (conveyord sends it second)."""
    names, sess = _run(order)
    assert len(names) == 3
    assert [i for i, _ in sess.results] == order
    assert dict(sess.results)["pre"] == pb.TASK_OUTCOME_SKIP_RETRY


@pytest.mark.parametrize(
    ("order", "message"),
    [
        (["after", "first", "pre"], "before its prerequisite"),
        (["pre", "after", "first"], "before its prerequisite"),
        (["first", "doomed", "pre"], "while it was blocked"),
        (["first", "first", "pre"], "dispatched twice"),
    ],
)
def test_dependencies_check_still_fails_an_illegal_order(order: list[str], message: str) -> None:
    """A dependent before its prerequisite, the cascade dependent, or a repeat is still a failure."""
    with pytest.raises(CheckFailed, match=message):
        _run(order)
