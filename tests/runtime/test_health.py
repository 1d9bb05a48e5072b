"""Liveness and readiness decisions from local state (the pure rules behind /healthz and /readyz)."""

from __future__ import annotations

import pytest

from conveyor_sdk._runtime.health import HealthInputs, liveness, readiness

UP = HealthInputs(
    {"fast": "open", "default": "open"}, alive={"fast": 1, "default": 2}, ready={"fast": 1, "default": 2}
)


def _with(**changes: object) -> HealthInputs:
    fields = {name: getattr(UP, name) for name in HealthInputs.__slots__}
    fields.update(changes)
    return HealthInputs(**fields)  # type: ignore[arg-type]


def test_everything_up_is_live_and_ready() -> None:
    """Every session open and every pool with a ready child: 200 ok on both."""
    assert liveness(UP) == (True, "ok")
    assert readiness(UP) == (True, "ok")


@pytest.mark.parametrize(
    ("phase", "reason"),
    [
        ("idle", "pool fast: session not connected"),
        ("awaiting-welcome", "pool fast: session waiting for the server's Welcome"),
        ("closing", "pool fast: session closing"),
    ],
)
def test_a_session_not_established_is_not_ready_but_alive(phase: str, reason: str) -> None:
    """One pool's session down (server unreachable, reconnecting): not ready, with why; still alive."""
    h = _with(sessions={"fast": phase, "default": "open"})
    assert readiness(h) == (False, reason)
    assert liveness(h) == (True, "ok")


def test_draining_is_alive_but_not_ready() -> None:
    """A drain must not get the pod killed (liveness ok) but must take it out of service."""
    h = _with(draining=True)
    assert liveness(h) == (True, "ok (draining)")
    assert readiness(h) == (False, "draining")


def test_no_ready_child_in_a_pool_is_not_ready() -> None:
    """Children starting or being replaced: not ready, still alive while some process exists."""
    h = _with(ready={"fast": 0, "default": 2})
    assert readiness(h) == (False, "pool fast: no child process ready")
    assert liveness(h)[0]


def test_liveness_failures() -> None:
    """A runtime failure, a dead periodic check or a pool with no live child fails liveness and readiness."""
    for h, reason in (
        (_with(failure="children keep dying"), "failed: children keep dying"),
        (_with(ticking=False), "the supervisor's periodic check stopped"),
        (_with(alive={"fast": 0, "default": 2}), "pool fast: no child process alive"),
    ):
        assert liveness(h) == (False, reason)
        assert readiness(h) == (False, reason)


def test_in_process_mode_needs_only_the_session() -> None:
    """--processes 0: no children to count; the one session decides readiness."""
    h = HealthInputs({"default": "open"}, processes=False)
    assert readiness(h) == (True, "ok")
    assert readiness(HealthInputs({"default": "idle"}, processes=False))[0] is False
    assert readiness(HealthInputs({}, processes=False)) == (False, "no session")
