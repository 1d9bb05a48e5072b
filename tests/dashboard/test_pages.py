"""Queue filters and paging, the other task actions, cron pause/resume, the events feed, escaped errors."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from playwright.sync_api import expect

from conveyor_sdk.client import SyncClient, task
from conveyor_sdk.worker import Registry
from tests.cli_client._helpers import uid
from tests.cli_client._worker import worker_thread


def test_queue_filters_and_paging(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """State, type and id-prefix filters narrow the list; 'Next page' follows the server's page token."""
    queue = uid("q")
    with SyncClient(server_url) as client:
        client.enqueue_batch([task("alpha", {"n": n}, queue=queue) for n in range(60)])
        beta = client.enqueue("beta", None, queue=queue, process_in=3600).id
    dash = dashboard_factory(server_url)
    page.goto(f"{dash.url}/queues/{queue}")
    expect(page.locator("#tasks tbody tr")).to_have_count(50)
    page.locator("a.more").click()
    expect(page.locator("#tasks tbody tr")).to_have_count(11)
    page.goto(f"{dash.url}/queues/{queue}?state=scheduled")
    expect(page.locator("#tasks tbody tr")).to_have_count(1)
    page.goto(f"{dash.url}/queues/{queue}")
    page.fill("input[name=type]", "beta")
    page.locator("form.filters button").click()
    expect(page.locator("#tasks tbody tr")).to_have_count(1)
    expect(page.locator("#tasks tbody tr")).to_have_attribute("data-task", beta)
    page.goto(f"{dash.url}/queues/{queue}?id={beta[:-2]}")
    expect(page.locator("#tasks tbody tr")).to_have_count(1)


def test_reschedule_run_archive_delete(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """Each task action on the task page reaches the server (archive and delete after a confirmation, and
    "No" changes nothing); the queue page then says which task was deleted."""
    queue = uid("q")
    dash = dashboard_factory(server_url)
    with SyncClient(server_url) as client:
        tid = client.enqueue("job", None, queue=queue, process_in=3600).id
        page.goto(f"{dash.url}/tasks/{tid}")
        page.fill("input[name=in_seconds]", "7200")
        page.locator("button.action-reschedule").click()
        expect(page.locator("#task-state")).to_have_text("scheduled")
        due = client.get_task(tid).process_at
        assert due is not None and due > datetime.now(UTC) + timedelta(seconds=5000)
        page.locator("button.action-archive").click()
        page.locator("#confirm-yes").click()
        expect(page.locator("#task-state")).to_have_text("archived")
        page.locator("button.action-run").click()
        expect(page.locator("#task-state")).to_have_text("pending")
        page.fill("input[name=in_seconds]", "soon")
        page.locator("button.action-reschedule").click()
        expect(page.locator("[role=alert]")).to_contain_text("must be a number")
        page.goto(f"{dash.url}/tasks/{tid}")
        page.locator("button.action-delete").click()
        expect(page.locator("#confirm-message")).to_contain_text(f"Delete task {tid}?")
        page.locator("#confirm-no").click()
        expect(page.locator("#task-state")).to_have_text("pending")
        assert client.get_task(tid).id == tid, "deleted although the user said no"
        page.locator("button.action-delete").click()
        page.locator("#confirm-yes").click()
        expect(page).to_have_url(f"{dash.url}/queues/{queue}?deleted={tid}")
        expect(page.locator("#notice")).to_contain_text(f"Task {tid} deleted.")
        assert client.admin.list_tasks(queue=queue).tasks == ()


def test_cron_pause_resume(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """The cron page lists entries with a next fire time; Pause and Resume change the entry on the server."""
    cron_id = uid("cron")
    with SyncClient(server_url) as client:
        client.admin.upsert_cron(cron_id, "0 0 3 * * *", "nightly", {"x": 1}, queue=uid("q"))
        dash = dashboard_factory(server_url)
        page.goto(f"{dash.url}/cron")
        row = page.locator(f'tr[data-cron="{cron_id}"]')
        expect(row).to_contain_text("active")
        expect(row).to_contain_text("UTC")
        row.locator("button").click()
        expect(row).to_contain_text("paused")
        assert client.admin.get_cron(cron_id).paused is True
        row.locator("button").click()
        expect(row).to_contain_text("active")
        assert client.admin.get_cron(cron_id).paused is False


def test_events_feed_and_escaped_error(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """The events page shows a failing task's events live; its HTML-laden error is shown as text."""
    queue = uid("q")
    reg = Registry()

    def boom(task: Any, ctx: Any) -> bytes:
        raise RuntimeError('<img src=x onerror="window.__pwned=1">bad')

    reg.handler("boom")(boom)
    dash = dashboard_factory(server_url)
    page.goto(f"{dash.url}/events")
    expect(page.locator("h1")).to_have_text("Live events")
    with SyncClient(server_url) as client, worker_thread(server_url, reg, [queue]):
        tid = client.enqueue("boom", None, queue=queue).id
        row = page.locator("#events tbody tr", has_text=tid).filter(has_text="retried")
        expect(row.first).to_contain_text('<img src=x onerror="window.__pwned=1">bad')
    page.goto(f"{dash.url}/tasks/{tid}")
    expect(page.locator("#last-error")).to_contain_text('<img src=x onerror="window.__pwned=1">bad')
    assert page.evaluate("window.__pwned === undefined")
    assert page.locator("main img").count() == 0
