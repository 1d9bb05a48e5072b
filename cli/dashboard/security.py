"""Access control, CSRF and response headers for the dashboard (one pure-ASGI middleware).

- **Auth** (only when ``auth_token`` is set): every path except ``/login`` and ``/static/`` needs
  the session cookie. The cookie holds an HMAC of the auth token, never the token itself; a browser
  gets it by posting the token to ``/login`` or by opening any page once with ``?token=...``.
- **CSRF**: every non-GET/HEAD request must carry an ``Origin`` (or, failing that, ``Referer``) whose
  scheme://host:port equals this request's own; anything else is 403. The cookie is also
  ``SameSite=Strict``.
- **Headers**: a strict Content-Security-Policy (scripts and styles from ``/static`` only, no
  inline script), ``nosniff``, no framing, same-origin referrers.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["COOKIE", "SecurityMiddleware", "cookie_value", "safe_next", "same_origin"]

COOKIE = "conveyor_dashboard"
SAFE_METHODS = {"GET", "HEAD"}
OPEN_PREFIXES = ("/login", "/static/")
HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def cookie_value(auth_token: str) -> str:
    """What the session cookie holds: an HMAC of the auth token (the token is never sent back)."""
    return hmac.new(auth_token.encode(), b"conveyor-dashboard-session", hashlib.sha256).hexdigest()


def same_origin(request: Request) -> bool:
    """True when Origin (or Referer) names exactly this request's scheme, host and port."""
    host = request.headers.get("host", "")
    if not host:
        return False
    expected = f"{request.url.scheme}://{host}".lower()
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        referer = request.headers.get("referer", "")
        if not referer:
            return False
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    return origin.lower() == expected


def safe_next(target: str | None) -> str:
    """A local redirect target (``/...``, never ``//host`` or a full URL); ``/`` otherwise."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


class SecurityMiddleware:
    """Wraps the app: security headers on every response, CSRF and (optional) auth checks."""

    def __init__(self, app: ASGIApp, auth_token: str | None) -> None:
        self.app = app
        self.auth_token = auth_token
        self.cookie = cookie_value(auth_token) if auth_token else ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        denied = self._check(request)
        if denied is not None:
            await _with_headers(denied)(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + [
                    (k.encode(), v.encode()) for k, v in HEADERS.items()
                ]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _check(self, request: Request) -> Response | None:
        if request.method not in SAFE_METHODS and not same_origin(request):
            return PlainTextResponse("cross-origin request refused (CSRF check)", status_code=403)
        if not self.auth_token or request.url.path.startswith(OPEN_PREFIXES):
            return None
        if hmac.compare_digest(request.cookies.get(COOKIE, ""), self.cookie):
            return None
        given = request.query_params.get("token")
        ok = given is not None and hmac.compare_digest(given.encode(), self.auth_token.encode())
        if request.method in SAFE_METHODS and ok:
            query = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = str(URL(path=request.url.path, query=urlencode(query)))
            return set_session(RedirectResponse(target, status_code=303), self.cookie)
        return _login_redirect(request)


def set_session(response: Response, value: str) -> Response:
    """Attach the session cookie (HttpOnly, SameSite=Strict)."""
    response.set_cookie(COOKIE, value, httponly=True, samesite="strict", path="/")
    return response


def _login_redirect(request: Request) -> Response:
    if request.method not in SAFE_METHODS or request.headers.get("x-dashboard-live"):
        return PlainTextResponse("login required", status_code=401)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse("/login?" + urlencode({"next": target}), status_code=303)


def _with_headers(response: Response) -> Any:
    for key, value in HEADERS.items():
        response.headers[key] = value
    return response
