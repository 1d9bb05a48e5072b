"""The reference server's Prometheus listener: upstream's series, on a port of its own, fed by real work."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Callable

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor_sdk.client import Client
from conveyor_sdk.types import RetryPolicy, TaskState
from conveyor_sdk.worker import Registry, SkipRetry, TaskContext, TaskData, Worker
from conveyor_server_min._engine.clock import FakeClock
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.metrics import BUCKETS, Histogram
from conveyor_server_min._engine.model import State, Task
from conveyor_server_min.config import ConfigError, ServerConfig, build_config
from conveyor_server_min.server import Server
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until
from tests.sdk_worker._helpers import KEEP, running, wait_state

# Every conveyor_* series (name, type, label names) a conveyord built here served on its metrics
# listener after tasks ran (``curl METRICS/metrics``, upstream's otel_scope_* labels left out).
UPSTREAM_SERIES = {
    ("conveyor_active", "gauge", ()),
    ("conveyor_sessions_active", "gauge", ()),
    ("conveyor_pending", "gauge", ("queue",)),
    ("conveyor_enqueued_total", "counter", ()),
    ("conveyor_dispatched_total", "counter", ()),
    ("conveyor_completed_total", "counter", ()),
    ("conveyor_failed_total", "counter", ()),
    ("conveyor_retried_total", "counter", ()),
    ("conveyor_archived_total", "counter", ()),
    ("conveyor_released_total", "counter", ()),
    ("conveyor_queue_latency_seconds", "histogram", ("queue",)),
    ("conveyor_process_duration_seconds", "histogram", ("queue",)),
}
UPSTREAM_BUCKETS = ["0", "5", "10", "25", "50", "75", "100", "250", "500", "750", "1000", "2500", "5000"]
_SAMPLE = re.compile(r"^([a-z_]+)(?:\{([^}]*)\})? (\S+)$")


def parse(text: str) -> tuple[dict[str, str], dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """Types by metric name, and sample values by (sample name, sorted labels)."""
    types: dict[str, str] = {}
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match, f"not an exposition line: {line!r}"
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', match.group(2) or "")))
            samples[(match.group(1), labels)] = float(match.group(3))
    return types, samples


def _series(text: str) -> set[tuple[str, str, tuple[str, ...]]]:
    types, samples = parse(text)
    out = set()
    for (name, labels), _ in samples.items():
        base = re.sub(r"_(bucket|sum|count)$", "", name) if types.get(name) is None else name
        names = tuple(k for k, _ in labels if k != "le")
        out.add((base, types[base], names))
    return out


def test_metrics_follow_real_work_with_upstreams_names() -> None:
    """Outcomes, latency/duration histograms, pending and sessions follow real tasks; names as conveyord."""
    reg = Registry()
    reg.handler("ok")(lambda t, c: b"")

    @reg.handler("skip")
    def skip(task: TaskData, ctx: TaskContext) -> None:
        raise SkipRetry("bad input")

    @reg.handler("boom")
    def boom(task: TaskData, ctx: TaskContext) -> None:
        raise ValueError("nope")

    async def main() -> None:
        server = Server(ServerConfig(port=0, dev=True, metrics_port=0))
        url = await server.start()
        try:
            assert server.metrics_url.endswith("/metrics") and server.metrics_url != url + "/metrics"
            async with httpx.AsyncClient() as http, Client(url) as client:
                await client.enqueue("ok", b"", queue="waiting", **KEEP)
                await client.enqueue("ok", b"", queue="waiting", **KEEP)
                before = parse((await http.get(server.metrics_url)).text)[1]
                assert before[("conveyor_pending", (("queue", "waiting"),))] == 2
                assert before[("conveyor_sessions_active", ())] == 0
                fast = RetryPolicy(base=0.05, max=0.1)
                async with running(Worker(url, queues={"work": 1}), reg):
                    ok = await client.enqueue("ok", b"", queue="work", **KEEP)
                    sk = await client.enqueue("skip", b"", queue="work", **KEEP)
                    bm = await client.enqueue(
                        "boom", b"", queue="work", max_retry=1, retry_policy=fast, **KEEP
                    )
                    await wait_state(client, ok.id, TaskState.COMPLETED)
                    await wait_state(client, sk.id, TaskState.ARCHIVED)
                    await wait_state(client, bm.id, TaskState.ARCHIVED)
                    during = parse((await http.get(server.metrics_url)).text)[1]
                    assert during[("conveyor_sessions_active", ())] == 1
                resp = await http.get(server.metrics_url)
        finally:
            await server.stop()
        assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = resp.text
        assert _series(text) == UPSTREAM_SERIES
        samples = parse(text)[1]
        assert samples[("conveyor_enqueued_total", ())] == 5
        assert samples[("conveyor_dispatched_total", ())] == 4  # boom twice; "waiting" never served
        assert samples[("conveyor_completed_total", ())] == 1
        assert samples[("conveyor_failed_total", ())] == 3  # skip once, boom twice
        assert samples[("conveyor_retried_total", ())] == 1
        assert samples[("conveyor_archived_total", ())] == 2
        assert samples[("conveyor_active", ())] == 0
        work = (("queue", "work"),)
        assert samples[("conveyor_queue_latency_seconds_count", work)] == 4
        assert samples[("conveyor_process_duration_seconds_count", work)] == 4
        inf = samples[("conveyor_process_duration_seconds_bucket", (("le", "+Inf"), ("queue", "work")))]
        assert inf == 4
        les = [le for (name, labels), _ in samples.items() if name.endswith("latency_seconds_bucket")
               for k, le in labels if k == "le"]  # fmt: skip
        assert les[: len(UPSTREAM_BUCKETS)] == UPSTREAM_BUCKETS

    asyncio.run(main())


def test_queue_latency_is_measured_from_when_the_task_became_due() -> None:
    """A task due at enqueue and leased 7 s later lands in the le=10 bucket, not le=5 (virtual clock)."""
    clock = FakeClock()
    engine = Engine(clock=clock)
    engine.enqueue(Task(id=engine.new_id(), queue="q", type="t", enqueued_at=engine.now()))
    clock.advance(7.0)
    task = next(engine.broker.iter_tasks_desc())
    engine.transitions.activate(task, "s1", 1, engine.now())
    assert task.state is State.ACTIVE
    samples = parse(engine.metrics_text())[1]
    assert samples[("conveyor_queue_latency_seconds_bucket", (("le", "5"), ("queue", "q")))] == 0
    assert samples[("conveyor_queue_latency_seconds_bucket", (("le", "10"), ("queue", "q")))] == 1
    assert samples[("conveyor_queue_latency_seconds_sum", (("queue", "q"),))] == 7.0
    assert samples[("conveyor_active", ())] == 1


def test_listener_answers_only_get_metrics_and_survives_bad_clients() -> None:
    """Other paths 404, other methods 405, an oversized head 431; a silent client does not stop scraping."""

    async def main() -> None:
        server = Server(ServerConfig(port=0, dev=True, metrics_port=0))
        url = await server.start()
        try:
            base = server.metrics_url.removesuffix("/metrics")
            async with httpx.AsyncClient() as http:
                assert (await http.get(base + "/")).status_code == 404
                assert (await http.post(server.metrics_url)).status_code == 405
                big = {"x-filler": "a" * 9000}
                assert (await http.get(server.metrics_url, headers=big)).status_code == 431
                host, port = base.removeprefix("http://").rsplit(":", 1)
                _, silent = await asyncio.open_connection(host, int(port))  # sends nothing, stays open
                assert (await http.get(server.metrics_url)).status_code == 200
                silent.close()
                # the API port does not serve metrics
                assert (await http.get(url + "/metrics")).status_code != 200
        finally:
            await server.stop()

    asyncio.run(main())


def test_metrics_port_from_environment_and_bad_values() -> None:
    """CONVEYOR_METRICS__LISTEN sets host and port as upstream's variable does; bad ports: ConfigError."""
    config = build_config({"dev": True}, env={"CONVEYOR_METRICS__LISTEN": "127.0.0.1:0"})
    assert (config.metrics_host, config.metrics_port) == ("127.0.0.1", 0)
    assert build_config({"dev": True}, env={}).metrics_port is None
    for flags, env in (({"metrics_port": 70000}, {}), ({}, {"CONVEYOR_METRICS__LISTEN": "9464"})):
        try:
            build_config({"dev": True, **flags}, env=env)
        except ConfigError as exc:
            assert "metrics" in str(exc).lower()
        else:
            raise AssertionError(f"accepted {flags} {env}")


def test_conveyor_server_prints_the_metrics_url(server_factory: Callable[..., ServerProcess]) -> None:
    """``conveyor server --metrics-port 0`` prints where the metrics are; a bad port exits 2 with one line."""
    proc = server_factory(["--metrics-port", "0"])
    line = wait_until(lambda: next((ln for ln in proc.output if ln.startswith("metrics on ")), None), 10)
    metrics_url = line.split("metrics on ", 1)[1].strip()
    assert "conveyor_sessions_active 0" in httpx.get(metrics_url).text
    bad = subprocess.run(
        [sys.executable, "-m", "cli", "server", "--dev", "--port", "0", "--metrics-port", "70000"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "--metrics-port" in bad.stderr


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(BUCKETS), st.floats(0, 20_000, allow_nan=False)), max_size=40))
def test_a_histogram_counts_each_sample_in_the_first_bucket_at_or_above_it(samples: list[float]) -> None:
    """Prometheus buckets are upper bounds: a sample equal to a bound counts in that bound's bucket,
    one above every bound in +Inf."""
    histogram = Histogram()
    for seconds in samples:
        histogram.observe(seconds)
    expected = [0] * (len(BUCKETS) + 1)
    for seconds in samples:
        expected[next((i for i, bound in enumerate(BUCKETS) if seconds <= bound), len(BUCKETS))] += 1
    assert histogram.counts == expected
    assert histogram.n == len(samples) and histogram.total == sum(samples)
