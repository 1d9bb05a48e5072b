"""Custom metrics from handlers in child processes reach the supervisor's /metrics, summed, recycle-proof."""

from __future__ import annotations

import re
import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path

from conveyor_sdk.client import SyncClient
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.runtime._worker_proc import WorkerProc

Factory = Callable[..., WorkerProc]

APP = """
import os, time
from conveyor_sdk import metrics
from conveyor_sdk._worker.registry import Registry

app = Registry()
SENT = metrics.counter("emails_sent_total", "Emails sent.", labels=("provider",))
BY_PID = metrics.counter("handled_by_pid_total", "Tasks per child pid.", labels=("pid",))
RENDER = metrics.histogram("render_seconds", "Render time.", buckets=(0.1, 0.5, 1.0))
ALIVE = metrics.gauge("children_reporting", "1 per live child that ran a task.")

@app.handler("send", queue="mail")
def send(task, ctx):
    time.sleep(0.05)  # long enough that both children get work
    SENT.labels(provider="ses").inc()
    BY_PID.labels(str(os.getpid())).inc()
    RENDER.observe(0.3)
    ALIVE.set(1)
    return b"ok"
"""

N = 12


def _scrape(base: str) -> str:
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
        body: str = resp.read().decode()
    return body


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _value(body: str, series: str) -> float:
    match = re.search(rf"^{re.escape(series)} (\S+)$", body, re.M)
    return float(match.group(1)) if match else -1.0


def test_counter_from_two_children_is_summed_and_survives_recycling(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """Two children, each recycled after 3 tasks: the counter is the sum of all, histograms add up."""
    (tmp_path / "mailapp.py").write_text(APP)
    proc = worker_factory(
        tmp_path,
        "mailapp:app",
        "--server",
        server.url,
        "-q",
        "mail=1",
        "--processes",
        "2",
        "--concurrency",
        "2",
        "--max-tasks-per-child",
        "1",
        "--metrics-port",
        "0",
    )
    proc.wait_for("established")
    base = proc.output.split("metrics listening on ", 1)[1].split()[0]

    def counted(n: int, recycles: int) -> Callable[[], str]:
        def check() -> str:
            body = _scrape(base)
            done = _value(body, 'conveyor_tasks_total{type="send",queue="mail",outcome="success"}') == n
            recycled = _value(body, 'conveyor_child_restarts_total{reason="recycled"}') >= recycles
            return body if done and recycled else ""

        return check

    with SyncClient(server.url) as client:
        for _ in range(N // 2):  # every child that runs one is replaced (--max-tasks-per-child 1)
            client.enqueue("send", b"", queue="mail")
        wait_until(counted(N // 2, 1), timeout=60, what=f"{N // 2} successes and a recycle")
        for _ in range(N // 2):  # run by the replacements
            client.enqueue("send", b"", queue="mail")
        wait_until(counted(N, 2), timeout=60, what=f"{N} successes in /metrics")
    pids = re.findall(r'^handled_by_pid_total\{pid="(\d+)"\} (\S+)$', _scrape(base), re.M)
    wait_until(lambda: any(not _alive(int(p)) for p, _ in pids), timeout=30, what="a recycled child to exit")
    body = _scrape(base)  # after a child that counted has exited
    assert _value(body, 'emails_sent_total{provider="ses"}') == N
    pids = re.findall(r'^handled_by_pid_total\{pid="(\d+)"\} (\S+)$', body, re.M)
    assert len(pids) >= 3, f"expected tasks in at least three children (two recycled), got {pids}"
    assert sum(float(n) for _, n in pids) == N
    assert _value(body, 'render_seconds_bucket{le="0.1"}') == 0
    assert _value(body, 'render_seconds_bucket{le="0.5"}') == N
    assert _value(body, 'render_seconds_bucket{le="+Inf"}') == N
    assert _value(body, "render_seconds_count") == N
    assert abs(_value(body, "render_seconds_sum") - 0.3 * N) < 1e-9
    assert "# TYPE emails_sent_total counter" in body and "# HELP emails_sent_total Emails sent." in body
    # The gauge counts only live children: the recycled ones no longer add their 1.
    assert 0 <= _value(body, "children_reporting") <= 2
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_processes_zero_exports_the_in_process_values(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory
) -> None:
    """--processes 0 runs handlers in the supervisor: /metrics exports their custom values, capacity
    and the per-task families (outcomes, run time, queue wait) as with child processes."""
    (tmp_path / "mailapp.py").write_text(APP)
    proc = worker_factory(
        tmp_path, "mailapp:app", "--server", server.url, "-q", "mail=1",
        "--processes", "0", "--concurrency", "3", "--metrics-port", "0",
    )  # fmt: skip
    proc.wait_for("established")
    base = proc.output.split("metrics listening on ", 1)[1].split()[0]
    with SyncClient(server.url) as client:
        for _ in range(3):
            client.enqueue("send", b"", queue="mail")

    done = 'conveyor_tasks_total{type="send",queue="mail",outcome="success"}'

    def counted() -> str:
        # The handler counts its send before it returns, so the task can still hold its slot
        # when the counter reads 3: wait for the three tasks to be counted as finished too.
        body = _scrape(base)
        idle = _value(body, 'conveyor_worker_busy{pool="default",queue="mail"}') == 0
        return body if idle and _value(body, done) == 3 else ""

    body = wait_until(counted, timeout=30, what="3 sends finished in /metrics")
    assert _value(body, 'emails_sent_total{provider="ses"}') == 3
    assert _value(body, "render_seconds_count") == 3
    assert _value(body, 'conveyor_worker_slots{pool="default"}') == 3
    run_time = 'conveyor_task_duration_seconds_count{type="send",queue="mail",outcome="success"}'
    assert _value(body, run_time) == 3
    # Each run sleeps 0.05 s: the sum is the handlers' time, not zero and not the wait.
    run_sum = _value(body, run_time.replace("_count", "_sum"))
    assert 0.15 <= run_sum < 3, run_sum
    assert _value(body, 'conveyor_worker_queue_wait_seconds_count{queue="mail"}') == 3
    assert _value(body, 'conveyor_tasks_in_flight{queue="mail"}') == 0
    assert "conveyor_worker_retries_total{" not in body and "conveyor_worker_archived_total{" not in body
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
