"""The server connection of ``conveyor_sdk.testing.ScriptedPeer`` (h2's public API, both paths)."""

from __future__ import annotations

import h2.config
import h2.connection
from h2.connection import ConnectionState

__all__ = ["keep_open_after_goaway", "peer_connection"]


def peer_connection() -> h2.connection.H2Connection:
    """A plain h2 server connection with str headers: a scripted peer judges what a client sends
    with h2's full validation, nothing skipped."""
    return h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))


def keep_open_after_goaway(conn: h2.connection.H2Connection) -> None:
    """h2 closes its state machine on a GOAWAY it sends; after a graceful one (NO_ERROR) reopen it
    so the script can still finish the streams the GOAWAY let through."""
    conn.state_machine.state = ConnectionState.SERVER_OPEN
