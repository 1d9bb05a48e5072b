"""Readiness names the reason a lost session gives (``server unreachable``), only while it reconnects."""

from __future__ import annotations

from conveyor_sdk._runtime.health import HealthInputs, liveness, readiness

DEAD = "the connection to the server is dead: no answer to an HTTP/2 PING within 10s"


def test_a_lost_session_says_server_unreachable_and_why() -> None:
    """Reconnecting after a keepalive gave up: 503 '... (server unreachable: <why>)'; liveness stays ok."""
    for phase, words in (("idle", "not connected"), ("awaiting-welcome", "waiting for the server's Welcome")):
        h = HealthInputs({"default": phase}, processes=False, errors={"default": DEAD})
        assert readiness(h) == (False, f"pool default: session {words} (server unreachable: {DEAD})")
        assert liveness(h) == (True, "ok")


def test_without_an_error_the_phase_is_the_reason() -> None:
    """Starting up (no session lost yet), or an error left from before: the phase's own words."""
    assert readiness(HealthInputs({"default": "idle"}, processes=False)) == (
        False,
        "pool default: session not connected",
    )
    h = HealthInputs({"default": "open"}, processes=False, errors={"default": DEAD})
    assert readiness(h) == (True, "ok")
    closing = HealthInputs({"default": "closing"}, processes=False, errors={"default": DEAD})
    assert readiness(closing) == (False, "pool default: session closing")
