"""Regenerate docs/img/dashboard-*.png: a demo system in the real dashboard, shot by headless chromium.

    .venv/bin/python scripts/dashboard_screenshots.py

Starts a dev reference server and ``conveyor dashboard`` on free ports, enqueues demo tasks, runs
an in-process worker (some tasks fail and retry, one stays active), then saves one PNG per page.
Needs Debian's ``chromium`` (``apt-get install chromium``); no browser is downloaded.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

from conveyor_sdk.client import SyncClient
from conveyor_sdk.worker import Registry, Worker
from conveyor_server_min.testing import ServerProcess

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"


def _demo(url: str, hold: threading.Event) -> tuple[Worker, threading.Thread, str]:
    reg = Registry()

    @reg.handler("email.send")
    def send(task: object, ctx: object) -> bytes:
        return b"sent"

    @reg.handler("report.build")
    def build(task: object, ctx: object) -> bytes:
        ctx.report_progress(62, "rendering page 31 of 50")  # type: ignore[attr-defined]
        hold.wait(120)
        return b"ok"

    @reg.handler("image.resize")
    def resize(task: object, ctx: object) -> bytes:
        raise ValueError("unsupported colour space: CMYK")

    with SyncClient(url) as client:
        for n in range(12):
            mail = {"to": f"user{n}@example.com", "template": "welcome"}
            client.enqueue("email.send", mail, queue="emails")
        client.enqueue("image.resize", bytes(range(64)), queue="media", max_retry=3)
        rid = client.enqueue(
            "report.build", {"customer": 4711, "period": "2026-11", "format": "pdf"}, queue="reports"
        ).id
        for n in range(5):
            client.enqueue("report.build", {"customer": n}, queue="reports", process_in=3600)
        client.admin.set_rate_limit("emails", 50, burst=10)
        client.admin.set_concurrency_limit("reports", 2)
        nightly = ("nightly-report", "0 0 2 * * *", "report.build", {"all": True})
        client.admin.upsert_cron(*nightly, queue="reports")
        client.admin.upsert_cron("digest", "0 */15 * * * *", "email.send", {"digest": True}, queue="emails")
        client.admin.pause_cron("digest")
    worker = Worker(url, queues={"emails": 3, "media": 2, "reports": 1}, concurrency=4)
    thread = threading.Thread(target=worker.run_sync, args=(reg,), daemon=True)
    thread.start()
    return worker, thread, rid


def main() -> None:
    """Shoot every page into docs/img/."""
    OUT.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(("--lease-ttl", "30s"))
    server.start()
    hold = threading.Event()
    worker, thread, rid = _demo(server.url, hold)
    cmd = [sys.executable, "-m", "conveyor_cli", "dashboard", "--server", server.url, "--port", "0"]
    cmd += ["--poll", "0.5"]
    dash = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert dash.stdout is not None
        match = re.search(r"dashboard on (\S+?)/? for", dash.stdout.readline())
        assert match, "dashboard did not start"
        base = match.group(1)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1480, "height": 760})
            page.goto(base + "/events")  # let the event feed collect a little
            page.wait_for_selector("#events tbody tr")
            for name, path in [
                ("overview", "/"),
                ("queue", "/queues/reports"),
                ("task", f"/tasks/{rid}"),
                ("workers", "/workers"),
                ("cron", "/cron"),
                ("events", "/events"),
                ("limits", "/limits"),
                ("search", "/search?type=report.build"),
            ]:
                page.goto(base + path)
                page.wait_for_selector("main h1")
                page.wait_for_timeout(700)  # one live refresh, so the status dot shows
                page.screenshot(path=str(OUT / f"dashboard-{name}.png"), full_page=True)
                print(f"wrote docs/img/dashboard-{name}.png")
            page.goto(base + "/queues/reports?state=scheduled")  # a bulk action's confirmation page
            page.locator("#tasks input[name=id]").first.check()
            page.locator("button.bulk-delete").click()
            page.wait_for_selector("#confirm-message")
            page.screenshot(path=str(OUT / "dashboard-confirm.png"), full_page=True)
            print("wrote docs/img/dashboard-confirm.png")
            browser.close()
    finally:
        hold.set()
        dash.terminate()
        dash.wait(10)
        worker.stop()
        thread.join(30)
        server.stop()


if __name__ == "__main__":
    main()
