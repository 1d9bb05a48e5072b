"""Dashboard safety: POST-only same-origin actions (CSRF), the optional auth token, headers, loopback bind."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
from playwright.sync_api import expect

from conveyor_sdk.client import SyncClient
from tests.cli_client._helpers import uid


def _scheduled(url: str) -> tuple[str, str]:
    queue = uid("q")
    with SyncClient(url) as client:
        return queue, client.enqueue("job", None, queue=queue, process_in=3600).id


def _state(url: str, tid: str) -> str:
    with SyncClient(url) as client:
        return client.get_task(tid).state.name


def test_actions_need_post_and_same_origin(server_url: str, dashboard_factory: Callable) -> None:
    """GET on an action is 405; a POST without Origin/Referer or from elsewhere is 403, changing nothing."""
    dash = dashboard_factory(server_url)
    queue, tid = _scheduled(server_url)
    action = f"{dash.url}/tasks/{tid}/cancel"
    with httpx.Client() as http:
        assert http.get(action).status_code == 405
        assert http.post(action).status_code == 403
        assert http.post(action, headers={"Origin": "http://evil.example"}).status_code == 403
        referer = {"Referer": "http://evil.example/" + dash.url}
        assert http.post(action, headers=referer).status_code == 403
        assert http.post(f"{dash.url}/queues/{queue}/pause", headers={"Origin": "null"}).status_code == 403
        assert _state(server_url, tid) == "SCHEDULED"
        ok = http.post(action, headers={"Origin": dash.url})
        assert ok.status_code == 303
    assert _state(server_url, tid) == "CANCELED"


def test_security_headers_and_loopback_bind(server_url: str, dashboard_factory: Callable) -> None:
    """Pages carry a CSP without inline script, nosniff and no framing; the default bind is 127.0.0.1."""
    dash = dashboard_factory(server_url)
    assert dash.url.startswith("http://127.0.0.1:")
    resp = httpx.get(dash.url + "/")
    csp = resp.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert resp.headers["x-content-type-options"] == "nosniff"
    assert resp.headers["x-frame-options"] == "DENY"


def test_refused_action_shows_reason(server_url: str, dashboard_factory: Callable) -> None:
    """Cancelling an already cancelled task answers the server's reason in a page, not a traceback."""
    dash = dashboard_factory(server_url)
    _queue, tid = _scheduled(server_url)
    with SyncClient(server_url) as client:
        client.admin.cancel_task(tid)
    resp = httpx.post(f"{dash.url}/tasks/{tid}/run", headers={"Origin": dash.url})
    assert resp.status_code in {400, 404, 409}
    assert 'role="alert"' in resp.text and "Traceback" not in resp.text


def test_auth_token_guards_every_page(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """With --auth-token every page/action needs the login cookie; the cookie never holds the token."""
    dash = dashboard_factory(server_url, "--auth-token", "dash-secret")
    queue, tid = _scheduled(server_url)
    with httpx.Client() as http:
        for path in ("/", f"/queues/{queue}", f"/tasks/{tid}", "/workers", "/cron", "/events"):
            resp = http.get(dash.url + path)
            assert resp.status_code == 303 and resp.headers["location"].startswith("/login"), path
        blocked = http.post(f"{dash.url}/tasks/{tid}/cancel", headers={"Origin": dash.url})
        assert blocked.status_code == 401
        wrong = http.get(f"{dash.url}/?token=nope")
        assert wrong.status_code == 303 and wrong.headers["location"].startswith("/login")
    assert _state(server_url, tid) == "SCHEDULED"

    page.goto(f"{dash.url}/tasks/{tid}")
    expect(page.locator("h1")).to_have_text("Log in")
    page.fill("input[name=token]", "wrong")
    page.click("button[type=submit]")
    expect(page.locator("[role=alert]")).to_contain_text("Wrong dashboard token")
    page.fill("input[name=token]", "dash-secret")
    page.click("button[type=submit]")
    expect(page.locator("#task-state")).to_have_text("scheduled")
    assert "dash-secret" not in page.content()
    cookies = page.context.cookies()
    assert cookies and all("dash-secret" not in c["value"] for c in cookies)
    assert all(c["httpOnly"] and c["sameSite"] == "Strict" for c in cookies)


def test_token_query_logs_in_once(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """Opening a page with ?token= sets the cookie and redirects to the same page without the token."""
    dash = dashboard_factory(server_url, env={"CONVEYOR_DASHBOARD_TOKEN": "env-secret"})
    page.goto(f"{dash.url}/workers?token=env-secret")
    expect(page.locator("h1")).to_have_text("Worker sessions")
    assert "token" not in page.url
    page.goto(f"{dash.url}/cron")
    expect(page.locator("h1")).to_have_text("Cron entries")


def test_cli_mistakes_are_one_line_errors(server_url: str) -> None:
    """A taken port or an empty --auth-token prints one `error:` line and exits 1; no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        base = [sys.executable, "-m", "conveyor_cli", "dashboard", "--server", server_url]
        for extra, message in (
            (["--port", port], f"cannot listen on 127.0.0.1:{port}"),
            (["--port", "0", "--auth-token", " "], "--auth-token must not be empty"),
        ):
            done = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 1, done.stderr
            assert message in done.stderr and "Traceback" not in done.stderr
