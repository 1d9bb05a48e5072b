"""Regenerate docs/img/dashboard-*.png: a demo system in the real dashboard, shot by headless chromium.

    .venv/bin/python scripts/dashboard_screenshots.py [--minutes 8]

Starts a dev reference server and ``conveyor dashboard`` on free ports, enqueues demo tasks, runs
an in-process worker (some tasks fail and retry, one stays active), then saves one PNG per page.
``--minutes N`` first runs a varying load for N minutes (mails at a changing rate, failing image
tasks, a queue paused for a while so a backlog builds and drains), so the charts, which the
dashboard keeps from its own start, have a shape. Needs Debian's ``chromium`` (``apt-get install
chromium``); no browser is downloaded.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import RetryPolicy
from conveyor_sdk.worker import Registry, Worker
from conveyor_server_min.testing import ServerProcess

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"


FAST_RETRY = RetryPolicy(base=5, max=20)


def _demo(url: str, hold: threading.Event) -> tuple[Worker, threading.Thread, str, str]:
    reg = Registry()

    @reg.handler("email.send")
    def send(task: object, ctx: object) -> bytes:
        return b"sent"

    @reg.handler("report.build")
    def build(task: object, ctx: object) -> bytes:
        ctx.report_progress(62, "rendering page 31 of 50")  # type: ignore[attr-defined]
        hold.wait(3600)  # active until the shots are taken (the finally below sets it)
        return b"ok"

    @reg.handler("image.resize")
    def resize(task: object, ctx: object) -> bytes:
        raise ValueError("unsupported colour space: CMYK")

    with SyncClient(url) as client:
        for n in range(12):
            mail = {"to": f"user{n}@example.com", "template": "welcome"}
            client.enqueue("email.send", mail, queue="emails")
        failed = client.enqueue(
            "image.resize", bytes(range(64)), queue="media", max_retry=3, retry_policy=FAST_RETRY
        ).id
        rid = client.enqueue(
            "report.build", {"customer": 4711, "period": "2026-11", "format": "pdf"}, queue="reports"
        ).id
        for n in range(5):
            client.enqueue("report.build", {"customer": n}, queue="reports", process_in=3600)
        client.admin.set_rate_limit("emails", 50, burst=10)
        client.admin.set_concurrency_limit("reports", 2)
        client.admin.set_group_config("emails", max_size=100, max_delay=30, grace_period=5)
        client.admin.set_group_config("emails", "digest", max_size=500, max_delay=900, grace_period=60)
        nightly = ("nightly-report", "0 0 2 * * *", "report.build", {"all": True})
        client.admin.upsert_cron(*nightly, queue="reports")
        client.admin.upsert_cron("digest", "0 */15 * * * *", "email.send", {"digest": True}, queue="emails")
        client.admin.pause_cron("digest")
    worker = Worker(url, queues={"emails": 3, "media": 2, "reports": 1}, concurrency=4)
    thread = threading.Thread(target=worker.run_sync, args=(reg,), daemon=True)
    thread.start()
    return worker, thread, rid, failed


def _load(url: str, minutes: float) -> None:
    """A varying load: mails at a rate that swings, a few failing image tasks a minute, and the
    mail queue paused for a minute and a half in the middle (its backlog builds, then drains)."""
    start = time.monotonic()
    paused = False
    with SyncClient(url) as client:
        while (elapsed := time.monotonic() - start) < minutes * 60:
            rate = 1.5 + math.sin(elapsed / 60) + (elapsed / 60) / minutes  # mails per second
            client.enqueue("email.send", {"to": "user@example.com"}, queue="emails")
            if int(elapsed * rate) % 25 == 0:
                client.enqueue("image.resize", b"", queue="media", max_retry=1, retry_policy=FAST_RETRY)
            pause = minutes * 60 * 0.4 <= elapsed < minutes * 60 * 0.4 + 90
            if pause != paused:
                paused = pause
                (client.admin.pause_queue if pause else client.admin.resume_queue)("emails")
            time.sleep(1 / rate)
        if paused:
            client.admin.resume_queue("emails")


def main() -> None:
    """Shoot every page into docs/img/."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=0, help="minutes of varying load first")
    minutes = parser.parse_args().minutes
    OUT.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(("--lease-ttl", "30s"))
    server.start()
    hold = threading.Event()
    cmd = [sys.executable, "-m", "conveyor_cli", "dashboard", "--server", server.url, "--port", "0"]
    cmd += ["--poll", "0.5"]
    dash = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)  # first: it keeps the history
    worker = thread = None
    try:
        assert dash.stdout is not None
        match = re.search(r"dashboard on (\S+?)/? for", dash.stdout.readline())
        assert match, "dashboard did not start"
        base = match.group(1)
        worker, thread, rid, failed = _demo(server.url, hold)
        _load(server.url, minutes)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1480, "height": 760})
            page.goto(base + "/events")  # let the event feed collect a little
            page.wait_for_selector("#events tbody tr")
            for name, path in [
                ("overview", "/"),
                ("queue", "/queues/reports"),
                ("task", f"/tasks/{rid}"),
                ("task-failed", f"/tasks/{failed}"),
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
        if worker is not None and thread is not None:
            worker.stop()
            thread.join(30)
        server.stop()


if __name__ == "__main__":
    main()
