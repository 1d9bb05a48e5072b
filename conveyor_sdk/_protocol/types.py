"""Small enums shared by the sans-I/O session machine and the runtime layers.

They live here (the lowest layer) so the protocol machine can name them; the
executor seam (``conveyor_sdk._worker.executor``) re-exports them unchanged.
"""

from __future__ import annotations

import enum

__all__ = ["CancelReason", "OutcomeKind"]


class CancelReason(enum.Enum):
    """Why the core cancelled a job; handlers see it on ``ctx.cancel_reason``."""

    DEADLINE = "deadline"
    SERVER_CANCEL = "server-cancel"
    DRAIN = "drain"


class OutcomeKind(enum.IntEnum):
    """Mirrors the wire ``TaskOutcome`` numbers; prints ``OutcomeKind.RETRY`` (not ``2``)."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, format_spec: str) -> str:
        return format(str(self), format_spec)

    UNSPECIFIED = 0
    SUCCESS = 1
    RETRY = 2
    SKIP_RETRY = 3
    RELEASED = 4
