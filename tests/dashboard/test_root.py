"""`conveyor server` serves the dashboard at / of its own RPC port (real server process, real HTTP)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import httpx
import pytest

from conveyor_sdk.client import SyncClient
from conveyor_server_min.testing import ServerProcess
from tests.cli_client._helpers import uid

ENQUEUE = "/conveyor.v1.TaskService/Enqueue"
Factory = Callable[..., ServerProcess]


@pytest.fixture
def h2() -> Iterator[httpx.Client]:
    """An httpx client speaking HTTP/2 with prior knowledge (h2c)."""
    with httpx.Client(http1=False, http2=True, timeout=20) as client:
        yield client


@pytest.fixture
def server_factory(server_factory: Factory) -> Factory:
    """Servers started as `conveyor server`, which serves the dashboard (the bare server has none)."""
    return functools.partial(server_factory, module="conveyor_cli.server_cmd")


def _paused(url: str, queue: str, token: str | None = None) -> bool:
    with SyncClient(url, token=token) as client:
        return {q.name: q.paused for q in client.admin.list_queues()}[queue]


def test_overview_on_the_rpc_port_h1_and_h2(server_factory: Factory, h2: httpx.Client) -> None:
    """GET / on the server's own port is the overview (HTTP/1.1 and h2c); RPCs and /healthz still work."""
    server = server_factory()
    queue = uid("q")
    with SyncClient(server.url) as client:  # an RPC over HTTP/2 on the same port
        client.enqueue("job", None, queue=queue)
    resp = httpx.get(server.url + "/", timeout=20)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    assert "<h1>Queues</h1>" in resp.text and f'data-queue="{queue}"' in resp.text
    resp2 = h2.get(server.url + "/")
    assert resp2.http_version == "HTTP/2" and f'data-queue="{queue}"' in resp2.text
    for client in (httpx, h2):
        assert client.get(server.url + "/healthz").text == "ok"
    ok = httpx.post(
        server.url + ENQUEUE, json={"type": "h1", "queue": queue}, timeout=20
    )  # Connect, HTTP/1.1
    assert ok.status_code == 200 and ok.json()["task"]["type"] == "h1"
    assert any(line.startswith(f"dashboard on {server.url}/ ") for line in server.output)


def test_queue_page_with_filters(server_factory: Factory) -> None:
    """The query string reaches the page: the type filter narrows the queue's task list."""
    server = server_factory()
    queue = uid("q")
    with SyncClient(server.url) as client:
        alpha = client.enqueue("alpha", None, queue=queue).id
        beta = client.enqueue("beta", None, queue=queue).id
    resp = httpx.get(f"{server.url}/queues/{queue}", params={"type": "beta", "state": "pending"}, timeout=20)
    assert resp.status_code == 200
    assert f'data-task="{beta}"' in resp.text and f'data-task="{alpha}"' not in resp.text
    unfiltered = httpx.get(f"{server.url}/queues/{queue}", timeout=20).text
    assert f'data-task="{alpha}"' in unfiltered


def test_pause_action_with_csrf_check(server_factory: Factory) -> None:
    """A same-origin form POST pauses the queue; the same POST from another origin is refused (403)."""
    server = server_factory()
    queue = uid("q")
    with SyncClient(server.url) as client:
        client.enqueue("job", None, queue=queue)
    action = f"{server.url}/queues/{queue}/pause"
    refused = httpx.post(action, data={}, headers={"origin": "http://evil.example"}, timeout=20)
    assert refused.status_code == 403 and _paused(server.url, queue) is False
    resp = httpx.post(action, data={}, headers={"origin": server.url}, timeout=20)
    assert resp.status_code == 303 and _paused(server.url, queue) is True


def _login(url: str, secret: str) -> httpx.Response:
    return httpx.post(f"{url}/login", data={"token": secret}, headers={"origin": url}, timeout=20)


def test_server_token_is_the_default_login_secret(server_factory: Factory) -> None:
    """With --token and no --dashboard-auth-token, pages need a login with the server's first token."""
    server = server_factory(["--token", "s3cret", "--token", "other"])
    first = httpx.get(server.url + "/", timeout=20)
    assert first.status_code == 303 and first.headers["location"].startswith("/login")
    live = httpx.get(server.url + "/", headers={"x-dashboard-live": "1"}, timeout=20)
    assert live.status_code == 401
    assert _login(server.url, "wrong").status_code == 401
    assert _login(server.url, "other").status_code == 401  # only the first token
    ok = _login(server.url, "s3cret")
    assert ok.status_code == 303 and "s3cret" not in ok.headers["set-cookie"]
    page = httpx.get(server.url + "/", cookies=ok.cookies, timeout=20)
    assert page.status_code == 200 and "<h1>Queues</h1>" in page.text and "s3cret" not in page.text
    no_bearer = httpx.post(server.url + ENQUEUE, json={"type": "t"}, timeout=20)
    assert no_bearer.status_code == 401  # the RPCs still need the bearer token


def test_dashboard_auth_token_replaces_the_server_token(server_factory: Factory) -> None:
    """--dashboard-auth-token is the login secret when given (the server token is then refused)."""
    server = server_factory(["--token", "s3cret", "--dashboard-auth-token", "dash"])
    assert _login(server.url, "s3cret").status_code == 401
    ok = _login(server.url, "dash")
    assert ok.status_code == 303
    assert httpx.get(server.url + "/workers", cookies=ok.cookies, timeout=20).status_code == 200


def test_no_dashboard_leaves_root_404(server_factory: Factory) -> None:
    """--no-dashboard: / is 404, a form POST is 415, /healthz still answers."""
    server = server_factory(["--no-dashboard"])
    assert httpx.get(server.url + "/", timeout=20).status_code == 404
    assert httpx.post(server.url + "/queues/q/pause", data={}, timeout=20).status_code == 415
    assert httpx.get(server.url + "/healthz", timeout=20).text == "ok"
    assert not any("dashboard on" in line for line in server.output)
