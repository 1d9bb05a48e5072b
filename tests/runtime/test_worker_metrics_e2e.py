"""The runtime's scaling and SLO metrics follow real tasks; the Grafana dashboard and KEDA recipe use them."""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import RetryPolicy, TaskState
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.conftest import FAST_ARGS
from tests.runtime._worker_proc import WorkerProc

Factory = Callable[..., WorkerProc]
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "conveyor-worker.json"

APP = """
import os, time
from conveyor_sdk._worker.registry import Registry

app = Registry()
GATE = os.path.join(os.path.dirname(__file__), "gate")

@app.handler("slow", queue="work")
def slow(task, ctx):
    deadline = time.monotonic() + 30
    while not os.path.exists(GATE) and time.monotonic() < deadline:
        time.sleep(0.01)
    return b""

@app.handler("ok", queue="work")
def ok(task, ctx):
    return b""

@app.handler("boom", queue="work")
def boom(task, ctx):
    raise ValueError("nope")
"""
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", re.M)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        body: str = resp.read().decode()
    return body


def _samples(body: str) -> dict[str, float]:
    return {name + (labels or ""): float(v) for name, labels, v in _SAMPLE.findall(body)}


def _families(body: str) -> set[str]:
    return set(re.findall(r"^# TYPE (\S+) \S+$", body, re.M))


def _start(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory, processes: int = 1
) -> tuple[WorkerProc, str]:
    (tmp_path / "slotapp.py").write_text(APP)
    proc = worker_factory(
        tmp_path, "slotapp:app", "--server", server.url, "-q", "work=1",
        "--processes", str(processes), "--concurrency", "2", "--metrics-port", "0",
    )  # fmt: skip
    proc.wait_for("established")
    return proc, proc.output.split("metrics listening on ", 1)[1].split()[0] + "/metrics"


@pytest.mark.parametrize("processes", [1, 0], ids=["child-process", "in-process"])
def test_capacity_wait_duration_retries_and_rss_follow_real_tasks(
    tmp_path: Path, server: ServerProcess, worker_factory: Factory, processes: int
) -> None:
    """Slots and busy give utilization; queue wait starts at process_at; retries and archives by type.

    The same with ``--processes 0`` (handlers in the supervisor), less the children's RSS."""
    proc, url = _start(tmp_path, server, worker_factory, processes)
    start = _samples(_get(url))
    assert start['conveyor_worker_slots{pool="default"}'] == 2
    assert start['conveyor_worker_busy{pool="default",queue="work"}'] == 0
    assert start['conveyor_worker_parked{pool="default",queue="work"}'] == 0
    with SyncClient(server.url) as client:
        slow = client.enqueue("slow", b"", queue="work", retention=300)

        def one_busy() -> dict[str, float]:
            s = _samples(_get(url))
            return s if s['conveyor_worker_busy{pool="default",queue="work"}'] == 1 else {}

        during = wait_until(one_busy, timeout=30, what="one busy slot")
        # sum(conveyor_worker_busy) / sum(conveyor_worker_slots), as the docs' PromQL computes it
        busy = sum(v for k, v in during.items() if k.startswith("conveyor_worker_busy{"))
        slots = sum(v for k, v in during.items() if k.startswith("conveyor_worker_slots{"))
        assert busy / slots == 0.5
        (tmp_path / "gate").write_text("")
        done = TaskState.COMPLETED
        wait_until(lambda: client.get_task(slow.id).state is done, timeout=30, what="slow done")
        late = client.enqueue("ok", b"", queue="work", process_in=2.0, retention=300)
        fast = RetryPolicy(base=0.05, max=0.1)
        boom = client.enqueue("boom", b"", queue="work", max_retry=1, retry_policy=fast, retention=300)
        for task, state in ((late.id, TaskState.COMPLETED), (boom.id, TaskState.ARCHIVED)):
            wait_until(lambda t=task, s=state: client.get_task(t).state is s, timeout=30, what=str(state))

    def settled() -> dict[str, float]:
        s = _samples(_get(url))
        return s if s.get('conveyor_worker_archived_total{type="boom"}') == 1 else {}

    after = wait_until(settled, timeout=30, what="the archived attempt in /metrics")
    wait = 'conveyor_worker_queue_wait_seconds_{}{{queue="work"}}'
    assert after[wait.format("count")] == 3  # slow, late, boom's first attempt (its retry is not counted)
    # late waited 2 s since its enqueue but became due only then: measured from process_at it is short
    assert after['conveyor_worker_queue_wait_seconds_bucket{queue="work",le="1.0"}'] == 3
    assert after['conveyor_worker_retries_total{type="boom"}'] == 1
    duration = 'conveyor_task_duration_seconds_count{{type="{}",queue="work",outcome="{}"}}'
    assert after[duration.format("boom", "retry")] == 2
    assert after[duration.format("slow", "success")] == 1
    rss = after.get('conveyor_child_rss_bytes{pool="default",child="default-0"}', 0)
    assert rss > 1 << 20 if processes else rss == 0
    assert after['conveyor_worker_busy{pool="default",queue="work"}'] == 0
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def _dashboard_metrics() -> set[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    assert len(exprs) >= 15
    return {re.sub(r"_(bucket|sum|count)$", "", m) for e in exprs for m in re.findall(r"conveyor_[a-z_]+", e)}


def _doc_queries() -> list[str]:
    """Every KEDA ``query:`` and every PromQL block of docs/runtime.md's metrics section."""
    text = (ROOT / "docs" / "runtime.md").read_text()
    section = text.split("### Metrics (`--metrics-port`)", 1)[1].split("### Health", 1)[0]
    queries = re.findall(r"^\s*query: (.+)$", section, re.M)
    queries += re.findall(r"```promql\n(.*?)```", section, re.S)
    for other in ("docs/deploy.md", "examples/deploy/k8s/worker.yaml"):
        queries += re.findall(r"^\s*query: (.+)$", (ROOT / other).read_text(), re.M)
    return queries


def test_dashboard_and_keda_queries_use_metrics_a_real_scrape_exports(
    tmp_path: Path, server_factory: Callable[..., ServerProcess], worker_factory: Factory
) -> None:
    """Every metric the Grafana JSON and the docs' KEDA/PromQL query is a family a real scrape serves."""
    server = server_factory((*FAST_ARGS, "--metrics-port", "0"))
    server_metrics = "".join(server.output).split("metrics on ", 1)[1].split()[0]
    proc, url = _start(tmp_path, server, worker_factory)
    with SyncClient(server.url) as client:
        client.enqueue("ok", b"", queue="work")
    wait_until(lambda: "conveyor_worker_queue_wait_seconds_count" in _get(url), timeout=30, what="a task")
    exported = _families(_get(url)) | _families(_get(server_metrics))
    dashboard = _dashboard_metrics()
    assert {"conveyor_worker_busy", "conveyor_worker_slots", "conveyor_pending"} <= dashboard
    assert dashboard <= exported, f"not exported: {sorted(dashboard - exported)}"
    queries = _doc_queries()
    assert len(queries) >= 4, queries
    found = (m for q in queries for m in re.findall(r"conveyor_[a-z_]+", q))
    named = {re.sub(r"_(bucket|sum|count)$", "", m) for m in found}
    assert {"conveyor_worker_busy", "conveyor_worker_slots", "conveyor_pending"} <= named
    assert named <= exported, f"not exported: {sorted(named - exported)}"
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
