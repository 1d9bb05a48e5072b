"""The operator pages in headless chromium: charts, task timeline, bulk actions, search, limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from playwright.sync_api import expect

from conveyor_sdk.client import SyncClient, task
from conveyor_sdk.types import RetryPolicy
from conveyor_sdk.worker import Registry, SkipRetry
from tests.cli_client._helpers import uid
from tests.cli_client._worker import worker_thread


def test_charts_follow_throughput_and_failures_live(
    server_url: str, dashboard_factory: Callable, page: Any
) -> None:
    """The overview's and the queue's charts count completed and failed attempts live, without a reload."""
    queue = uid("q")
    reg = Registry()
    reg.handler("ok")(lambda task, ctx: b"ok")

    def bad(task: Any, ctx: Any) -> bytes:
        raise SkipRetry("nope")  # archived at once: one failed attempt

    reg.handler("bad")(bad)
    dash = dashboard_factory(server_url)
    page.goto(dash.url + "/")
    page.evaluate("window.__same_document = true")
    with SyncClient(server_url) as client, worker_thread(server_url, reg, [queue]):
        client.enqueue_batch([task("ok", {"n": n}, queue=queue) for n in range(5)])
        client.enqueue("bad", None, queue=queue)
        expect(page.locator('figure[data-chart="done"]')).to_have_attribute("data-peak", "5")
        expect(page.locator('figure[data-chart="failed"]')).to_have_attribute("data-peak", "1")
        expect(page.locator('figure[data-chart="done"] polyline')).to_have_count(1)
    assert page.evaluate("window.__same_document") is True, "the page was reloaded, not live-updated"
    page.goto(f"{dash.url}/queues/{queue}")
    expect(page.locator('figure[data-chart="done"]')).to_have_attribute("data-peak", "5")
    expect(page.locator('figure[data-chart="depth"] .peak')).to_contain_text("now 0")


def test_canceled_is_shown_as_not_reported(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """The overview's canceled column says '—' (not a false 0) and why; the queue's filter lists them."""
    queue = uid("q")
    with SyncClient(server_url) as client:
        tid = client.enqueue("job", None, queue=queue, process_in=3600).id
        client.admin.cancel_task(tid)
    dash = dashboard_factory(server_url)
    page.goto(dash.url + "/")
    row = page.locator(f'tr[data-queue="{queue}"]')
    headers = [h.lower() for h in page.locator("#queues thead th").all_text_contents()]
    cells = dict(zip(headers, [c.strip() for c in row.locator("td").all_text_contents()], strict=False))
    assert cells["canceled"] == "—" and cells["scheduled"] == "0"
    expect(page.locator("#unknown-note")).to_contain_text("no canceled count")
    page.goto(f"{dash.url}/queues/{queue}?state=canceled")
    expect(page.locator(f'tr[data-task="{tid}"]')).to_be_visible()


def test_task_page_shows_traceback_timeline_and_run_time(
    server_url: str, dashboard_factory: Callable, page: Any
) -> None:
    """A failed task's page shows the worker's full error (its summary and the handler's stack), the
    timestamps in order, run time and attempt."""
    queue = uid("q")
    reg = Registry()

    def third_layer() -> bytes:
        raise ValueError("the third layer broke")

    def deep(task: Any, ctx: Any) -> bytes:
        return third_layer()

    reg.handler("deep")(deep)
    dash = dashboard_factory(server_url)
    fast = RetryPolicy(base=0.05, max=0.1)
    with SyncClient(server_url) as client:
        tid = client.enqueue(
            "deep", {"order": 7}, queue=queue, retention=600, max_retry=1, retry_policy=fast
        ).id
        with worker_thread(server_url, reg, [queue]):
            page.goto(f"{dash.url}/tasks/{tid}")
            expect(page.locator("#task-state")).to_have_text("archived")
        error = client.get_task(tid).last_error
    expect(page.locator("#last-error")).to_contain_text("ValueError: the third layer broke (at ")
    shown = page.locator("#last-error").inner_text()
    assert shown == error and "Traceback (most recent call last):" in shown
    assert shown.index(", in deep\n") < shown.index(", in third_layer\n")
    steps = page.locator("#timeline li").evaluate_all("els => els.map(e => e.dataset.step)")
    assert steps[0] == "enqueued" and steps[-2:] == ["started", "finished"]
    expect(page.locator("#run-time")).not_to_have_text("—")
    expect(page.locator("#attempt")).to_contain_text("2 of at most")


def test_bulk_cancel_delete_and_run_selected(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """Ticked tasks survive live updates; Cancel/Delete ask first, then apply to exactly the ticked ones."""
    queue = uid("q")
    with SyncClient(server_url) as client:
        ids = [
            t.task.id  # type: ignore[union-attr]
            for t in client.enqueue_batch(
                [task("job", {"n": n}, queue=queue, process_in=3600) for n in range(4)]
            )
        ]
        dash = dashboard_factory(server_url)
        page.goto(f"{dash.url}/queues/{queue}")
        for tid in ids[:2]:
            page.locator(f'input[name=id][value="{tid}"]').check()
        page.locator("h1").click()  # focus out of the inputs: only the selection may hold the poll now
        expect(page.locator("#live-status")).to_have_text("paused · tasks selected")
        expect(page.locator("input[name=id]:checked")).to_have_count(2)
        page.locator("button.bulk-cancel").click()
        expect(page.locator("#confirm-message")).to_have_text("Cancel 2 tasks?")
        assert {client.get_task(t).state.name for t in ids} == {"SCHEDULED"}
        page.locator("#confirm-yes").click()
        expect(page.locator("#notice")).to_contain_text("Canceled: 2 tasks")
        assert [client.get_task(t).state.name for t in ids] == [
            "CANCELED",
            "CANCELED",
            "SCHEDULED",
            "SCHEDULED",
        ]
        page.locator(f'input[name=id][value="{ids[2]}"]').check()
        page.locator("button.bulk-run").click()  # not destructive: no confirmation
        expect(page.locator("#notice")).to_contain_text("Run now: 1 tasks")
        assert client.get_task(ids[2]).state.name == "PENDING"
        for tid in ids[:2]:
            page.locator(f'input[name=id][value="{tid}"]').check()
        page.locator("button.bulk-delete").click()
        page.locator("#confirm-no").click()
        assert len(client.admin.list_tasks(queue=queue).tasks) == 4
        for tid in ids[:2]:
            page.locator(f'input[name=id][value="{tid}"]').check()
        page.locator("button.bulk-delete").click()
        page.locator("#confirm-yes").click()
        expect(page.locator("#notice")).to_contain_text("Deleted: 2 tasks")
        assert {t.id for t in client.admin.list_tasks(queue=queue).tasks} == set(ids[2:])


def test_rerun_archived_of_a_type(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """'Re-run archived' of one type asks first, then makes exactly that type's archived tasks due again."""
    queue = uid("q")
    with SyncClient(server_url) as client:
        made = client.enqueue_batch(
            [task(kind, None, queue=queue, process_in=3600) for kind in ("a", "a", "b", "a")]
        )
        made_ids = [r.task.id for r in made if r.task is not None]
        for tid in made_ids[:3]:
            client.admin.archive_task(tid)
        dash = dashboard_factory(server_url)
        page.goto(f"{dash.url}/queues/{queue}")
        page.fill("#rerun-form input[name=type]", "a")
        page.locator("button.rerun").click()
        expect(page.locator("#confirm-message")).to_contain_text("of type 'a'")
        page.locator("#confirm-yes").click()
        expect(page.locator("#notice")).to_contain_text("Re-ran archived: 2 tasks")
        states = [client.get_task(tid).state.name for tid in made_ids]
        assert states == ["PENDING", "PENDING", "ARCHIVED", "SCHEDULED"]


def test_search_by_id_type_and_state(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """The header box finds a task by id; the search page narrows by type and state across queues."""
    q1, q2, kind = uid("q"), uid("q"), uid("type")
    with SyncClient(server_url) as client:
        one = client.enqueue(kind, None, queue=q1).id
        two = client.enqueue(kind, None, queue=q2, process_in=3600).id
        other = client.enqueue("else", None, queue=q2).id
    dash = dashboard_factory(server_url)
    page.goto(dash.url + "/workers")
    page.fill(".quick-search input", one)
    page.press(".quick-search input", "Enter")
    expect(page.locator("#results tbody tr")).to_have_count(1)
    expect(page.locator(f'tr[data-task="{one}"]')).to_be_visible()
    page.goto(f"{dash.url}/search")
    page.fill("#search-form input[name=type]", kind)
    page.locator("#search-form button").click()
    expect(page.locator("#results tbody tr")).to_have_count(2)
    assert page.locator(f'tr[data-task="{other}"]').count() == 0
    page.select_option("#search-form select[name=state]", "scheduled")
    page.locator("#search-form button").click()
    expect(page.locator("#results tbody tr")).to_have_count(1)
    expect(page.locator(f'tr[data-task="{two}"]')).to_be_visible()
    page.goto(f"{dash.url}/search?q=no-such-task-{uid('x')}")
    expect(page.locator("#search-summary")).to_contain_text("0 found")


def test_limits_page_sets_and_removes(server_url: str, dashboard_factory: Callable, page: Any) -> None:
    """Rate, concurrency and group settings are set from the forms and removed after a confirmation."""
    queue = uid("q")
    with SyncClient(server_url) as client:
        client.enqueue("job", None, queue=queue)
        dash = dashboard_factory(server_url)
        page.goto(f"{dash.url}/limits")
        form = page.locator("#rate-form")
        form.locator("input[name=queue]").fill(queue)
        form.locator("input[name=rate]").fill("120/m")
        form.locator("input[name=burst]").fill("4")
        form.locator("button").click()
        expect(page.locator("#notice")).to_contain_text("Saved the rate setting")
        expect(page.locator(f'#rates tr[data-queue="{queue}"]')).to_contain_text("2.0/s")
        form = page.locator("#concurrency-form")
        form.locator("input[name=queue]").fill(queue)
        form.locator("input[name=max_active]").fill("3")
        form.locator("button").click()
        form = page.locator("#group-form")
        form.locator("input[name=queue]").fill(queue)
        form.locator("input[name=group]").fill("tenant-7")
        form.locator("input[name=max_size]").fill("25")
        form.locator("input[name=max_delay]").fill("30s")
        form.locator("input[name=grace_period]").fill("5s")
        form.locator("button").click()
        expect(page.locator(f'#groups tr[data-queue="{queue}"]')).to_contain_text("25")
        admin = client.admin
        assert [(r.rate_per_sec, r.burst) for r in admin.list_rate_limits() if r.queue == queue] == [(2.0, 4)]
        assert [c.max_active for c in admin.list_concurrency_limits() if c.queue == queue] == [3]
        groups = [g for g in admin.list_group_configs() if g.queue == queue]
        assert [(g.group, g.max_size, g.max_delay.total_seconds()) for g in groups] == [
            ("tenant-7", 25, 30.0)
        ]
        page.locator(f'#rates tr[data-queue="{queue}"] button.remove').click()
        expect(page.locator("#confirm-message")).to_contain_text(f"Remove the rate limit of {queue}?")
        page.locator("#confirm-yes").click()
        expect(page.locator("#notice")).to_contain_text("Removed the rate setting")
        assert not [r for r in admin.list_rate_limits() if r.queue == queue]
        page.locator(f'#groups tr[data-queue="{queue}"] button.remove').click()
        page.locator("#confirm-yes").click()
        assert not [g for g in admin.list_group_configs() if g.queue == queue]
        page.locator("#rate-form input[name=queue]").fill(queue)
        page.locator("#rate-form input[name=rate]").fill("-1")
        page.locator("#rate-form button").click()
        expect(page.locator("[role=alert]")).to_contain_text("rate must be a finite number greater than 0")
