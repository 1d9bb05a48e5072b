"""Dashboard fixtures: `conveyor dashboard` as a real child process, and headless Debian chromium.

The browser is the system ``chromium`` driven by Playwright (``executable_path``): browser downloads
do not work on these machines, so ``playwright install`` is never run. ``.ci/run`` installs chromium
when it is missing; a machine without it skips these tests with that reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ADDRESS = re.compile(r"dashboard on (http://\S+?)/? for ")


class DashboardProcess:
    """``conveyor dashboard ... --port 0``; ``url`` is parsed from its first stdout line."""

    def __init__(self, server: str, *args: str, env: dict[str, str] | None = None) -> None:
        cmd = [sys.executable, "-m", "conveyor_cli", "dashboard", "--server", server, "--port", "0"]
        cmd += ["--poll", "0.3", *args]
        full_env = {**os.environ, **(env or {})}
        full_env.pop("CONVEYOR_TOKEN", None)
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env
        )
        self.stderr: list[str] = []
        threading.Thread(target=self._drain_err, daemon=True).start()
        self.url = self._wait_url(30.0)

    def _drain_err(self) -> None:
        assert self.proc.stderr is not None
        try:
            for line in self.proc.stderr:
                self.stderr.append(line)
        except ValueError:  # closed by stop()
            return

    def _wait_url(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            match = ADDRESS.search(line)
            if match:
                return match.group(1)
            if not line and self.proc.poll() is not None:
                break
        self.stop()
        raise AssertionError(f"dashboard did not start: {''.join(self.stderr)}")

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        return self.proc.returncode


@pytest.fixture
def dashboard_factory() -> Iterator[Callable[..., DashboardProcess]]:
    """Start dashboards; each is SIGTERMed at teardown and must exit 0 without printing a traceback."""
    started: list[DashboardProcess] = []

    def start(server: str, *args: str, env: dict[str, str] | None = None) -> DashboardProcess:
        proc = DashboardProcess(server, *args, env=env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        code = proc.stop()
        assert "Traceback" not in "".join(proc.stderr), "".join(proc.stderr)
        assert code == 0, f"dashboard exit code {code}: {''.join(proc.stderr)}"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One headless Debian chromium per test module.

    Module scope, not session: while Playwright's sync API is active the main thread looks like it
    runs an event loop, so it must be gone before other modules' tests call ``asyncio.run``.
    """
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it: apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)  # generous: the machine is shared

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    """A fresh browser context (no cookies) and page; 15 s default waits."""
    context = browser.new_context()  # type: ignore[attr-defined]
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    yield pg
    context.close()
