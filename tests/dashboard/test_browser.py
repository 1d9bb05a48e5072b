"""The dashboard in a real headless chromium against the reference server and a real worker."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from playwright.sync_api import expect

from conveyor_sdk.client import SyncClient
from conveyor_sdk.worker import Registry
from conveyor_server_min.testing import ServerProcess
from tests.cli_client._helpers import uid
from tests.cli_client._worker import worker_thread


def test_overview_lists_queues_with_counts(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """The overview shows every queue with its per-state counts and running/paused status."""
    queue = uid("q")
    with SyncClient(server_url) as client:
        for n in range(3):
            client.enqueue("job", {"n": n}, queue=queue)
        client.enqueue("later", None, queue=queue, process_in=3600)
    dash = dashboard_factory(server_url)
    page.goto(dash.url + "/")
    row = page.locator(f'tr[data-queue="{queue}"]')
    expect(row).to_be_visible()
    headers = [h.lower() for h in page.locator("#queues thead th").all_text_contents()]
    cells = [c.strip() for c in row.locator("td").all_text_contents()]
    by_header = dict(zip(headers, cells, strict=False))
    assert by_header["pending"] == "3"
    assert by_header["scheduled"] == "1"
    assert by_header["total"] == "4"
    expect(row.locator(".queue-status")).to_have_text("running")


def test_task_page_follows_pending_to_completed(
    server_url: str, dashboard_factory: Callable, page: Any
) -> None:
    """A task page updates live (no reload) from pending to active to completed as a real worker runs it."""
    queue = uid("q")
    release = threading.Event()
    reg = Registry()

    def work(task: Any, ctx: Any) -> bytes:
        ctx.report_progress(40, "halfway")
        assert release.wait(30), "test never released the task"
        return b"ok"

    reg.handler("work")(work)
    dash = dashboard_factory(server_url)
    with SyncClient(server_url) as client:
        tid = client.enqueue("work", {"n": 1}, queue=queue, retention=600).id
        page.goto(f"{dash.url}/tasks/{tid}")
        expect(page.locator("#task-state")).to_have_text("pending")
        page.evaluate("window.__same_document = true")
        with worker_thread(server_url, reg, [queue]):
            expect(page.locator("#task-state")).to_have_text("active")
            expect(page.locator("#task-progress")).to_have_attribute("value", "40")
            release.set()
            expect(page.locator("#task-state")).to_have_text("completed")
    assert page.evaluate("window.__same_document") is True, "the page was reloaded, not live-updated"


def test_cancel_from_task_page(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """Cancel asks first (nothing changes until confirmed), then cancels and the page shows the new state."""
    queue = uid("q")
    dash = dashboard_factory(server_url)
    with SyncClient(server_url) as client:
        tid = client.enqueue("job", None, queue=queue, process_in=3600).id
        page.goto(f"{dash.url}/tasks/{tid}")
        expect(page.locator("#task-state")).to_have_text("scheduled")
        page.locator("button.action-cancel").click()
        expect(page.locator("#confirm-message")).to_contain_text(f"Cancel task {tid}?")
        assert client.get_task(tid).state.name == "SCHEDULED", "cancelled before confirmation"
        page.locator("#confirm-yes").click()
        expect(page.locator("#task-state")).to_have_text("canceled")
        assert client.get_task(tid).state.name == "CANCELED"
        expect(page.locator("button.action-cancel")).to_have_count(0)


def test_pause_and_resume_queue(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """Pause on the overview pauses the queue on the server; Resume undoes it."""
    queue = uid("q")
    dash = dashboard_factory(server_url)
    with SyncClient(server_url) as client:
        client.enqueue("job", None, queue=queue)
        page.goto(dash.url + "/")
        row = page.locator(f'tr[data-queue="{queue}"]')
        row.locator("button.pause").click()
        expect(row.locator(".queue-status")).to_have_text("paused")
        assert {q.name: q.paused for q in client.admin.list_queues()}[queue] is True
        row.locator("button.resume").click()
        expect(row.locator(".queue-status")).to_have_text("running")
        assert {q.name: q.paused for q in client.admin.list_queues()}[queue] is False


def test_payload_with_script_shows_as_text(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """A payload and a type holding <script>/HTML render as text: nothing runs, no element is made."""
    queue = uid("q")
    evil = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b id="inj">x</b>'
    dash = dashboard_factory(server_url)
    with SyncClient(server_url) as client:
        tid = client.enqueue("job<b id='t'>", {"html": evil}, queue=queue, process_in=3600).id
        page.goto(f"{dash.url}/tasks/{tid}")
        expect(page.locator("#payload")).to_contain_text("<script>window.__pwned = 1</script>")
        page.goto(f"{dash.url}/queues/{queue}")
        expect(page.locator("#tasks")).to_contain_text("job<b id='t'>")
    assert page.evaluate("window.__pwned === undefined")
    assert page.locator("#inj").count() == 0
    assert page.locator("#t").count() == 0


def test_binary_payload_as_hex(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """An octet-stream payload shows as a hex dump with its size."""
    dash = dashboard_factory(server_url)
    with SyncClient(server_url) as client:
        data = bytes(range(40))
        tid = client.enqueue("blob", data, queue=uid("q"), process_in=3600).id
    page.goto(f"{dash.url}/tasks/{tid}")
    expect(page.locator("#payload")).to_contain_text("00000000  00 01 02 03")
    expect(page.locator("h2", has_text="Payload")).to_contain_text("40 bytes")


def test_server_down_shows_banner(
    server_factory: Callable[..., ServerProcess], dashboard_factory: Callable, page: Any
) -> None:
    """A server that is down shows a clear banner (no stack trace), also live on an open page."""
    server = server_factory()
    dash = dashboard_factory(server.url)
    page.goto(dash.url + "/")
    expect(page.locator("h1")).to_have_text("Queues")
    server.stop()
    banner = page.locator("#banner")
    expect(banner).to_contain_text(f"Cannot reach the Conveyor server at {server.url}")
    page.reload()
    expect(banner).to_contain_text("Cannot reach the Conveyor server")
    assert "Traceback" not in page.content()


def test_refused_token_shows_banner(
    server_factory: Callable[..., ServerProcess], dashboard_factory: Callable, page: Any
) -> None:
    """A server that refuses the dashboard's token shows the refusal, and the token is never in the page."""
    server = server_factory(["--token", "right-token"])
    dash = dashboard_factory(server.url, "--token", "wrong-token-xyz")
    response = page.goto(dash.url + "/workers")
    assert response.status == 502
    expect(page.locator("#banner")).to_contain_text("refused the dashboard's token")
    assert "wrong-token-xyz" not in page.content()
    good = dashboard_factory(server.url, "--token", "right-token")
    page.goto(good.url + "/")
    expect(page.locator("h1")).to_have_text("Queues")
    assert "right-token" not in page.content()
    assert re.search(r"right-token", str(page.context.cookies())) is None


def test_dashboard_down_shows_offline_banner(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """When the dashboard process itself stops, an open page says so instead of freezing silently."""
    dash = dashboard_factory(server_url)
    page.goto(dash.url + "/")
    expect(page.locator("#live-status")).to_contain_text("live ·")
    expect(page.locator("#offline")).to_be_hidden()
    assert dash.stop() == 0
    expect(page.locator("#offline")).to_be_visible()
    expect(page.locator("#live-status")).to_have_text("offline")
