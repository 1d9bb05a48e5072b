"""Liveness (``/healthz``) and readiness (``/readyz``) from local state: pure functions, no I/O.

* **Liveness** answers "would restarting this process help?": it fails only when the
  runtime has failed (children cannot load the app), the supervisor's periodic check
  stopped, or a pool has no child process alive at all. A drain, a lost server
  connection or a child being replaced are *not* liveness failures (a restart would not
  fix the server, and would cut a drain short).
* **Readiness** answers "is this worker taking work now?": it also fails while draining,
  while any pool's session is not established (connecting, waiting for Welcome,
  reconnecting after the server went away: ``(server unreachable: <why the last session
  ended>)``), or while a pool has no ready child.

Neither makes a server round trip: the session's own state (its stream is up and the
server's Welcome arrived) is the signal. A dead server shows up as soon as the stream
breaks; a silent link (blackholed, partitioned) when the session's keepalive gives up, an
HTTP/2 PING unanswered for ``--keepalive-timeout`` (10 s; at most interval + timeout, 15 s,
after the link's last answer: see ``conveyor_sdk._transport.keepalive``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["PHASE_REASONS", "HealthInputs", "liveness", "readiness"]

PHASE_REASONS = {
    "idle": "not connected",
    "awaiting-welcome": "waiting for the server's Welcome",
    "closing": "closing",
    "stopped": "stopped",
}


@dataclass(frozen=True, slots=True)
class HealthInputs:
    """What the supervisor knows right now."""

    sessions: Mapping[str, str]  # pool -> session phase ("open" = established)
    alive: Mapping[str, int] = field(default_factory=dict)  # pool -> child processes alive
    ready: Mapping[str, int] = field(default_factory=dict)  # pool -> children ready for work
    processes: bool = True  # False: --processes 0 (no children)
    failure: str | None = None  # the runtime failed (exit 5 follows)
    ticking: bool = True  # the supervisor's periodic check runs
    draining: bool = False
    errors: Mapping[str, str] = field(default_factory=dict)  # pool -> why its last session ended


def liveness(h: HealthInputs) -> tuple[bool, str]:
    """(alive, reason): ``(True, "ok")`` or the first reason a restart is due."""
    if h.failure is not None:
        return False, f"failed: {h.failure}"
    if not h.ticking:
        return False, "the supervisor's periodic check stopped"
    if h.processes:
        for pool in h.sessions:
            if h.alive.get(pool, 0) == 0:
                return False, f"pool {pool}: no child process alive"
    return True, "ok (draining)" if h.draining else "ok"


def readiness(h: HealthInputs) -> tuple[bool, str]:
    """(ready, reason): ready only while every pool's session is established and has a ready child."""
    ok, why = liveness(h)
    if not ok:
        return ok, why
    if h.draining:
        return False, "draining"
    for pool, phase in h.sessions.items():
        if phase != "open":
            why = f"pool {pool}: session {PHASE_REASONS.get(phase, phase)}"
            error = h.errors.get(pool)
            if error and phase in ("idle", "awaiting-welcome"):  # lost or not reachable: reconnecting
                why += f" (server unreachable: {error})"
            return False, why
        if h.processes and h.ready.get(pool, 0) == 0:
            return False, f"pool {pool}: no child process ready"
    if not h.sessions:
        return False, "no session"
    return True, "ok"
