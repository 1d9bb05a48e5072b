"""``python -m conveyor_conformance.mutants.server_mutant``: the reference server, broken on request.

``MUTATION`` (environment) selects one broken rule, then the normal
``conveyor_server_min`` command line runs:

no-credits         every session may hold two more deliveries than Hello.concurrency
ignore-heartbeats  Heartbeat frames extend no lease
ignore-progress    Progress frames are dropped
keep-silent        a session that sends nothing while holding tasks is never closed (its leases lapse)
lapse-back         a task whose lease lapsed may go straight back to the session it lapsed in
dispatch-before-welcome
                   the Welcome goes out one loop turn late, so a backlog's Dispatches precede it
                   (what upstream conveyord can do, server-behavior.md §15.8)

Small patches of engine internals, used only to prove the server checks can fail.
"""

from __future__ import annotations

import os
import sys
from typing import Any

EXTRA = 2


def _free(self: Any) -> int:
    return int(self.concurrency) + EXTRA - len(self.deliveries)


def _ignore(self: Any, *args: Any) -> None:
    return None


def _never(self: Any, *args: Any) -> bool:
    return False


def _late_welcome() -> None:
    import asyncio

    from conveyor_server_min._services import session

    push = session.Outbox.push

    def late(self: Any, msg: Any) -> None:
        if msg.WhichOneof("frame") == "welcome":
            asyncio.get_running_loop().call_soon(push, self, msg)  # after start_session's dispatches
            return
        push(self, msg)

    session.Outbox.push = late  # type: ignore[method-assign]  # the mutation itself


def apply(mutation: str) -> None:
    """Patch the engine for ``mutation`` (ValueError for an unknown one)."""
    from conveyor_server_min._engine import dispatcher, engine, sessions

    if mutation == "no-credits":
        sessions.SessionState.free = property(_free)  # type: ignore[assignment,method-assign]  # the mutation itself
    elif mutation == "ignore-heartbeats":
        engine.Engine.heartbeat = _ignore  # type: ignore[method-assign,assignment]  # the mutation itself
    elif mutation == "ignore-progress":
        engine.Engine.progress = _ignore  # type: ignore[method-assign,assignment]  # the mutation itself
    elif mutation == "keep-silent":
        engine.Engine.close_silent = lambda self: 0  # type: ignore[method-assign]  # the mutation itself
    elif mutation == "lapse-back":
        dispatcher.Dispatcher.declines = _never  # type: ignore[method-assign,assignment]  # the mutation itself
    elif mutation == "dispatch-before-welcome":
        _late_welcome()
    else:
        raise ValueError(f"unknown server MUTATION {mutation!r}")


def main() -> None:
    """Patch, then run the server CLI."""
    try:
        apply(os.environ.get("MUTATION", ""))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    from conveyor_cli.server_cmd import main as server_main

    server_main()


if __name__ == "__main__":
    main()
