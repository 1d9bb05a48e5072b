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
        asked = http.post(action, headers={"Origin": dash.url})
        assert asked.status_code == 200 and 'name="confirm" value="yes"' in asked.text
        assert _state(server_url, tid) == "SCHEDULED"
        ok = http.post(action, headers={"Origin": dash.url}, data={"confirm": "yes"})
        assert ok.status_code == 303
    assert _state(server_url, tid) == "CANCELED"


def _new_actions(dash_url: str, queue: str, tid: str) -> list[tuple[str, dict[str, Any]]]:
    """Every POST the bulk and limits pages add, each with a form that would change something."""
    yes = {"confirm": "yes"}
    return [
        (f"{dash_url}/queues/{queue}/bulk", {"action": "cancel", "id": tid, **yes}),
        (f"{dash_url}/queues/{queue}/bulk", {"action": "run", "id": tid}),
        (f"{dash_url}/queues/{queue}/rerun-archived", yes),
        (f"{dash_url}/limits/rate", {"queue": queue, "rate": "5", "burst": "1"}),
        (f"{dash_url}/limits/concurrency", {"queue": queue, "max_active": "2"}),
        (
            f"{dash_url}/limits/group",
            {"queue": queue, "max_size": "3", "max_delay": "1s", "grace_period": "1s"},
        ),
        (f"{dash_url}/limits/rate/delete", {"queue": queue, **yes}),
        (f"{dash_url}/limits/concurrency/delete", {"queue": queue, **yes}),
        (f"{dash_url}/limits/group/delete", {"queue": queue, **yes}),
    ]


def _untouched(url: str, queue: str, tid: str) -> bool:
    with SyncClient(url) as client:
        admin = client.admin
        limits = [*admin.list_rate_limits(), *admin.list_concurrency_limits(), *admin.list_group_configs()]
        return client.get_task(tid).state.name == "SCHEDULED" and not [x for x in limits if x.queue == queue]


def test_new_actions_need_post_same_origin_and_login(server_url: str, dashboard_factory: Callable) -> None:
    """Bulk, re-run-archived and limits POSTs: GET 405, cross-origin 403, no login 401; nothing changes."""
    dash = dashboard_factory(server_url, "--auth-token", "dash-secret")
    queue, tid = _scheduled(server_url)
    with httpx.Client() as http:
        for url, form in _new_actions(dash.url, queue, tid):
            assert http.get(url).status_code in {303, 405}, url  # 303: to the login page first
            assert http.post(url, data=form).status_code == 403, url
            evil = {"Origin": "http://evil.example"}
            assert http.post(url, data=form, headers=evil).status_code == 403, url
            assert http.post(url, data=form, headers={"Origin": dash.url}).status_code == 401, url
        assert http.get(f"{dash.url}/limits").status_code == 303
        assert http.get(f"{dash.url}/search?q={tid}").status_code == 303
    assert _untouched(server_url, queue, tid)


def test_destructive_new_actions_ask_first(server_url: str, dashboard_factory: Callable) -> None:
    """Bulk cancel/delete, re-run archived and removing a limit answer a confirm page; nothing changes."""
    dash = dashboard_factory(server_url)
    queue, tid = _scheduled(server_url)
    with SyncClient(server_url) as client:
        client.admin.set_rate_limit(queue, 3.0, burst=1)
    origin = {"Origin": dash.url}
    with httpx.Client() as http:
        for path, form in (
            (f"/queues/{queue}/bulk", {"action": "cancel", "id": tid}),
            (f"/queues/{queue}/bulk", {"action": "delete", "id": tid}),
            (f"/queues/{queue}/rerun-archived", {}),
            ("/limits/rate/delete", {"queue": queue}),
        ):
            resp = http.post(dash.url + path, data=form, headers=origin)
            assert resp.status_code == 200 and 'id="confirm-yes"' in resp.text, path
    assert _state(server_url, tid) == "SCHEDULED"
    with SyncClient(server_url) as client:
        assert [r.queue for r in client.admin.list_rate_limits() if r.queue == queue] == [queue]


def test_limits_form_mistakes_are_reasons(server_url: str, dashboard_factory: Callable) -> None:
    """A bad rate, burst, limit or duration answers 400 with a one-line reason in a banner, no traceback."""
    dash = dashboard_factory(server_url)
    queue = uid("q")
    origin = {"Origin": dash.url}
    cases = [
        ("/limits/rate", {"queue": queue, "rate": "fast", "burst": "1"}, "use tasks per second"),
        ("/limits/rate", {"queue": queue, "rate": "5", "burst": "0"}, "burst must be at least 1"),
        ("/limits/concurrency", {"queue": queue, "max_active": "x"}, "max active must be a whole number"),
        (
            "/limits/group",
            {"queue": queue, "max_size": "0", "max_delay": "1s", "grace_period": "1s"},
            "max size must be at least 1",
        ),
        (
            "/limits/group",
            {"queue": queue, "max_size": "2", "max_delay": "soon", "grace_period": "1s"},
            "max delay",
        ),
        ("/limits/rate", {"queue": "", "rate": "5"}, "queue is required"),
    ]
    for path, form, reason in cases:
        resp = httpx.post(dash.url + path, data=form, headers=origin)
        assert resp.status_code == 400, (path, form, resp.status_code)
        assert reason in resp.text and 'role="alert"' in resp.text and "Traceback" not in resp.text, reason


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
        blocked = http.post(
            f"{dash.url}/tasks/{tid}/cancel", headers={"Origin": dash.url}, data={"confirm": "yes"}
        )
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
