"""The banner a page shows for a failed server call (shared by the page views and the actions)."""

from __future__ import annotations

from conveyor_sdk.errors import ConveyorError

__all__ = ["problem"]


def problem(exc: Exception, server: str) -> dict[str, str]:
    """A banner for a failed call: a title and one line, never a traceback."""
    if isinstance(exc, ConveyorError):
        code = exc.code.connect_name
        if code in {"unauthenticated", "permission_denied"}:
            title = "The Conveyor server refused the dashboard's token"
        elif code in {"unavailable", "deadline_exceeded"}:
            title = f"Cannot reach the Conveyor server at {server}"
        elif code == "not_found":
            title = "Not found"
        elif code == "invalid_argument":
            title = "Invalid request"
        else:
            title = "The Conveyor server answered with an error"
        return {"title": title, "detail": f"{code}: {exc.message}", "code": code}
    title = "The dashboard failed to build this page"
    return {"title": title, "detail": type(exc).__name__, "code": "internal"}
