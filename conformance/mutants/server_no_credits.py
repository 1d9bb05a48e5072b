"""``python -m conveyor_conformance.mutants.server_no_credits``: the reference server, ignoring credits.

Patches the engine so every session may hold two more outstanding deliveries
than its Hello.concurrency, then runs the normal ``conveyor_server_min``
command line. Used only to prove the credit checks can fail.
"""

from __future__ import annotations

from typing import Any

from conveyor_server_min._engine import sessions

EXTRA = 2


def _free(self: Any) -> int:
    return int(self.concurrency) + EXTRA - len(self.deliveries)


def main() -> None:
    """Patch, then run the server CLI."""
    sessions.SessionState.free = property(_free)  # type: ignore[assignment,method-assign]
    from conveyor_cli.server_cmd import main as server_main

    server_main()


if __name__ == "__main__":
    main()
