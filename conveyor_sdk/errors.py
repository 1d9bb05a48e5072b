"""One error tree for the whole SDK, with codes that match the wire.

Every failure a user can see is a :class:`ConveyorError` carrying a :class:`Code`
(the Connect/gRPC status codes), a message, and whether retrying can help.
Foreign exceptions (connectrpc, pyqwest, h2, OS) are translated at exactly one
boundary per transport and never escape.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "AlreadyExists",
    "Canceled",
    "Code",
    "ConveyorError",
    "DeadlineExceeded",
    "DuplicateTask",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ProtocolError",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "error_for_code",
]


class Code(enum.Enum):
    """Connect / gRPC status codes. ``value`` is the Connect name; ``grpc`` the number."""

    CANCELED = ("canceled", 1)
    UNKNOWN = ("unknown", 2)
    INVALID_ARGUMENT = ("invalid_argument", 3)
    DEADLINE_EXCEEDED = ("deadline_exceeded", 4)
    NOT_FOUND = ("not_found", 5)
    ALREADY_EXISTS = ("already_exists", 6)
    PERMISSION_DENIED = ("permission_denied", 7)
    RESOURCE_EXHAUSTED = ("resource_exhausted", 8)
    FAILED_PRECONDITION = ("failed_precondition", 9)
    ABORTED = ("aborted", 10)
    OUT_OF_RANGE = ("out_of_range", 11)
    UNIMPLEMENTED = ("unimplemented", 12)
    INTERNAL = ("internal", 13)
    UNAVAILABLE = ("unavailable", 14)
    DATA_LOSS = ("data_loss", 15)
    UNAUTHENTICATED = ("unauthenticated", 16)

    @property
    def connect_name(self) -> str:
        """The Connect protocol's string form, e.g. ``invalid_argument``."""
        return self.value[0]

    @property
    def grpc(self) -> int:
        """The gRPC numeric status."""
        return self.value[1]

    @property
    def http_status(self) -> int:
        """HTTP status that Connect unary maps this code to."""
        return _HTTP_STATUS[self]

    @classmethod
    def from_grpc(cls, number: int) -> Code:
        """Code for a gRPC status number; unknown numbers map to UNKNOWN."""
        return _BY_GRPC.get(number, cls.UNKNOWN)

    @classmethod
    def from_connect(cls, name: str) -> Code:
        """Code for a Connect name; unknown names map to UNKNOWN."""
        return _BY_NAME.get(name, cls.UNKNOWN)

    @classmethod
    def from_http_status(cls, status: int) -> Code:
        """Code implied by an HTTP status when no Connect body says otherwise."""
        return _FROM_HTTP.get(status, cls.UNKNOWN)


_BY_GRPC = {c.grpc: c for c in Code}
_BY_NAME = {c.connect_name: c for c in Code}
_HTTP_STATUS = {
    Code.CANCELED: 499,
    Code.UNKNOWN: 500,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 400,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.UNAUTHENTICATED: 401,
}
_FROM_HTTP = {
    400: Code.INTERNAL,
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.UNIMPLEMENTED,
    429: Code.UNAVAILABLE,
    502: Code.UNAVAILABLE,
    503: Code.UNAVAILABLE,
    504: Code.UNAVAILABLE,
}


class ConveyorError(Exception):
    """Root of every error the SDK raises.

    Attributes:
        code: the wire status code.
        message: human-readable text (as sent by the server, or ours).
        retryable: whether repeating the same call can succeed.
        details: structured extras (e.g. ``{"http_status": 503}``).
    """

    code: ClassVar[Code] = Code.UNKNOWN
    default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str = "",
        *,
        retryable: bool | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = self.default_retryable if retryable is None else retryable
        self.details: Mapping[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return f"[{self.code.connect_name}] {self.message}" if self.message else f"[{self.code.connect_name}]"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code.connect_name!r}, message={self.message!r})"


class Canceled(ConveyorError):
    """The call was canceled."""

    code = Code.CANCELED


class Unknown(ConveyorError):
    """The peer reported an unknown error."""

    code = Code.UNKNOWN


class InvalidArgument(ConveyorError):
    """The request or frame violated the contract; not retryable as-is."""

    code = Code.INVALID_ARGUMENT


class ProtocolError(InvalidArgument):
    """The peer (or we) broke the wire protocol; fatal for a session."""


class DeadlineExceeded(ConveyorError):
    """The call did not finish in its time budget."""

    code = Code.DEADLINE_EXCEEDED
    default_retryable = True


class NotFound(ConveyorError):
    """The referenced task or entry does not exist."""

    code = Code.NOT_FOUND


class AlreadyExists(ConveyorError):
    """A duplicate task id or an active unique key."""

    code = Code.ALREADY_EXISTS


DuplicateTask = AlreadyExists


class PermissionDenied(ConveyorError):
    """The token is valid but not allowed to do this (e.g. read-only server)."""

    code = Code.PERMISSION_DENIED


class ResourceExhausted(ConveyorError):
    """A limit was hit (message too large, too many streams)."""

    code = Code.RESOURCE_EXHAUSTED


class FailedPrecondition(ConveyorError):
    """The object is in a state that does not allow the action."""

    code = Code.FAILED_PRECONDITION


class Unimplemented(ConveyorError):
    """The server does not implement this method."""

    code = Code.UNIMPLEMENTED


class Internal(ConveyorError):
    """Server-side failure."""

    code = Code.INTERNAL


class Unavailable(ConveyorError):
    """The server cannot be reached or cannot serve right now; retryable."""

    code = Code.UNAVAILABLE
    default_retryable = True


class Unauthenticated(ConveyorError):
    """Missing or invalid bearer token."""

    code = Code.UNAUTHENTICATED


_CLASS_FOR_CODE: dict[Code, type[ConveyorError]] = {
    cls.code: cls
    for cls in (
        Canceled,
        Unknown,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Unimplemented,
        Internal,
        Unavailable,
        Unauthenticated,
    )
}


def error_for_code(
    code: Code, message: str = "", *, details: Mapping[str, Any] | None = None
) -> ConveyorError:
    """Build the most specific error class for ``code``."""
    cls = _CLASS_FOR_CODE.get(code)
    if cls is None:
        err = ConveyorError(message, details=details)
        err.code = code  # type: ignore[misc]  # codes without a dedicated class keep the root type
        return err
    return cls(message, details=details)
