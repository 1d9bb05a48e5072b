"""`conveyor dashboard --server A,B` keeps serving every page when the first server is down."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from conveyor_sdk.client import SyncClient
from conveyor_server_min.testing import ServerProcess
from tests.cli_client._helpers import uid
from tests.conftest import FAST_ARGS

PAGES = ["/", "/workers", "/cron", "/events", "/limits"]


def _queue_page(dash: str, queue: str) -> httpx.Response:
    return httpx.get(f"{dash}/queues/{queue}", timeout=20)


def test_dashboard_with_two_addresses_serves_when_the_first_is_down(
    server_factory: Callable[..., ServerProcess], dashboard_factory: Callable
) -> None:
    """Both up: pages come from A. A stopped: the same dashboard shows B's queue, no banner."""
    first, second = server_factory(FAST_ARGS), server_factory(FAST_ARGS)
    qa, qb = uid("on-a"), uid("on-b")
    with SyncClient(first.url) as a, SyncClient(second.url) as b:
        a.enqueue("dash:t", b"", queue=qa)
        b.enqueue("dash:t", b"", queue=qb)
    dash = dashboard_factory(f"{first.url},{second.url}")
    overview = httpx.get(dash.url + "/", timeout=20)
    assert overview.status_code == 200 and qa in overview.text and qb not in overview.text

    assert first.stop() == 0  # the first address is now refused
    for path in PAGES:
        page = httpx.get(dash.url + path, timeout=20)
        assert page.status_code == 200, (path, page.status_code, page.text[-500:])
        assert "Cannot reach the Conveyor server" not in page.text, path
    assert qb in httpx.get(dash.url + "/", timeout=20).text
    shown = _queue_page(dash.url, qb)
    assert shown.status_code == 200 and "dash:t" in shown.text
