"""Pure functions that turn HTTP/2 and RPC status signals into ConveyorErrors.

Each error message says who is at fault: "the server ..." for peer behaviour,
"this client ..." for ours. No I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from h2.errors import ErrorCodes

from conveyor_sdk._protocol.framing import error_from_grpc_trailers
from conveyor_sdk.errors import (
    Code,
    ConveyorError,
    Internal,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
    Unknown,
    error_for_code,
)

__all__ = [
    "CONTENT_TYPES",
    "connection_error",
    "goaway_error",
    "http_status_error",
    "reset_error",
    "response_headers_error",
]

CONTENT_TYPES = {"grpc": "application/grpc", "connect": "application/connect+proto"}
_MAX_ERROR_BODY = 64 * 1024
_ACCEPTED_CONTENT_TYPES = {
    "grpc": ("application/grpc", "application/grpc+proto"),
    "connect": ("application/connect+proto",),
}


def _code_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return f"0x{code:x}"


def reset_error(code: int) -> ConveyorError:
    """Error for a RST_STREAM from the server before the stream finished."""
    name = _code_name(code)
    text = f"the server reset the session stream ({name})"
    if code in (ErrorCodes.CANCEL, ErrorCodes.REFUSED_STREAM):
        return Unavailable(text, details={"h2_error": name})
    if code == ErrorCodes.ENHANCE_YOUR_CALM:
        return ResourceExhausted(text, details={"h2_error": name})
    if code == ErrorCodes.INADEQUATE_SECURITY:
        return PermissionDenied(text, details={"h2_error": name})
    return Internal(text, retryable=True, details={"h2_error": name})


def goaway_error(code: int, data: bytes | None) -> ConveyorError:
    """Error for a GOAWAY that ends our stream (an error code, or our stream not processed)."""
    name = _code_name(code)
    extra = data.decode("utf-8", "replace") if data else ""
    text = f"the server closed the connection (GOAWAY {name})" + (f": {extra}" if extra else "")
    return Unavailable(text, details={"h2_error": name})


def connection_error(exc: BaseException | None) -> ConveyorError:
    """Error for a connection lost without a proper end of the stream."""
    why = f": {exc}" if exc is not None and str(exc) else ""
    return Unavailable(f"the connection to the server was lost{why}")


def http_status_error(status: int, body: bytes, content_type: str) -> ConveyorError:
    """Error for a non-200 response; a Connect JSON error body wins over the status mapping."""
    details = {"http_status": status}
    if content_type.startswith("application/json") and body:
        try:
            obj = json.loads(body[:_MAX_ERROR_BODY])
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("code"), str):
            code = Code.from_connect(obj["code"])
            return error_for_code(code, str(obj.get("message", "")), details=details)
    code = Code.from_http_status(status)
    return error_for_code(code, f"the server answered HTTP {status}", details=details)


def response_headers_error(protocol: str, headers: Mapping[str, str]) -> tuple[ConveyorError | None, bool]:
    """Check a 200 response's headers: (error or None, whether this is a gRPC Trailers-Only response)."""
    if protocol == "grpc" and "grpc-status" in headers:
        return error_from_grpc_trailers(dict(headers)), True
    content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type not in _ACCEPTED_CONTENT_TYPES[protocol]:
        return Unknown(f"the server answered with unexpected content-type {content_type!r}"), False
    return None, False


def max_error_body() -> int:
    """Largest error body this client buffers."""
    return _MAX_ERROR_BODY
