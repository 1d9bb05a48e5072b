"""Dashboard settings (one frozen value, built by ``conveyor dashboard`` / ``conveyor server``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DashboardConfig"]


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    """What the dashboard talks to and how it protects itself.

    ``token`` is the Conveyor server's bearer token: it stays in this process and is never put in
    a page, a cookie or a script. ``auth_token`` (when set) is what a browser must present once
    (login form or ``?token=``) to get the session cookie that every page and action requires.
    """

    server: str
    token: str | None = None
    auth_token: str | None = None
    poll_interval: float = 1.5  # seconds between live-update polls in the browser
    rpc_timeout: float = 5.0  # per admin call; a down server fails fast with a banner
    event_buffer: int = 500  # events kept for the events page (ring buffer)
    page_size: int = 50  # tasks per queue page
    # Start the WatchEvents feed at the first request instead of at startup (``conveyor server``:
    # a server nobody browses keeps no event stream to itself).
    feed_on_demand: bool = False
