"""Custom metrics: the handler API, one process's bounded store, and the supervisor's aggregate."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import pytest

from conveyor_sdk import metrics
from conveyor_sdk._runtime.custom import CustomMetrics
from conveyor_sdk._runtime.metrics import Metrics
from conveyor_sdk._runtime.mstore import STORE, Family, MetricError, Store
from conveyor_sdk._runtime.pipe import FrameReader, MetricFamilyMsg, MetricsReport, encode
from conveyor_sdk._worker.executor import Job, Outcome, OutcomeKind, TaskData
from conveyor_sdk.app import App
from conveyor_sdk.testing import AppRunner, call_task, start_server
from conveyor_sdk.worker import TaskContext

_app = App()
_CALLS = metrics.counter("test_calls_total", "Calls.", labels=("kind",))


@_app.task("metered")
def _metered(payload: int, ctx: TaskContext) -> int:
    _CALLS.labels(kind="metered").inc(payload)
    return payload


@pytest.fixture(autouse=True)
def _zeroed() -> Iterator[None]:
    metrics.reset()
    yield
    metrics.reset()


def test_call_task_records_into_the_process_store() -> None:
    """A handler run by call_task updates this process's values, readable with value() and render()."""
    assert call_task(_metered, 3).ok
    assert call_task(_metered, 2).ok
    assert metrics.value("test_calls_total", kind="metered") == 5
    assert 'test_calls_total{kind="metered"} 5' in metrics.render()


def test_declaring_again_returns_the_same_series_and_conflicts_raise() -> None:
    """Same name and shape: the same series (help may differ); another kind or labels: MetricError."""
    again = metrics.counter("test_calls_total", labels=("kind",))
    again.labels("x").inc()
    _CALLS.labels("x").inc()
    assert metrics.value("test_calls_total", kind="x") == 2
    with pytest.raises(MetricError, match="already declared differently"):
        metrics.gauge("test_calls_total", labels=("kind",))
    with pytest.raises(MetricError, match="already declared differently"):
        metrics.counter("test_calls_total", labels=("other",))


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda: metrics.counter("bad-name"), "not a Prometheus name"),
        (lambda: metrics.counter("conveyor_mine_total"), "reserved"),
        (lambda: metrics.counter("x_total", labels=("le",)), "reserved"),
        (lambda: metrics.counter("x_total", labels=("a", "a")), "repeat"),
        (lambda: metrics.counter("x_total", labels=("__a",)), "not valid"),
        (lambda: metrics.histogram("h", buckets=(1.0, 0.5)), "ascending"),
        (lambda: metrics.histogram("h", buckets=()), "ascending"),
        (lambda: metrics.gauge("g", mode="avg"), "mode"),  # type: ignore[arg-type]
    ],
)
def test_bad_declarations_raise_metric_error(declare: object, message: str) -> None:
    """Bad names, labels, buckets and modes are a typed MetricError (an InvalidArgument)."""
    with pytest.raises(MetricError, match=message):
        declare()  # type: ignore[operator]


def test_misuse_raises_metric_error() -> None:
    """Negative increments, missing or extra labels, NaN observations: MetricError naming the metric."""
    with pytest.raises(MetricError, match="call labels"):
        _CALLS.inc()
    with pytest.raises(MetricError, match=">= 0"):
        _CALLS.labels("a").inc(-1)
    with pytest.raises(MetricError, match="label strings"):
        _CALLS.labels("a", "b")
    with pytest.raises(MetricError, match="by name"):
        _CALLS.labels(nope="a")
    with pytest.raises(MetricError, match="already has its labels"):
        _CALLS.labels("a").labels("b")
    with pytest.raises(MetricError, match="NaN"):
        metrics.histogram("test_nan_seconds").observe(float("nan"))
    with pytest.raises(MetricError, match="no metric named"):
        metrics.value("never_declared_total")


def test_histogram_buckets_gauge_and_snapshot() -> None:
    """Observations land in their le bucket (a bound is inclusive); gauges set, inc and dec."""
    h = metrics.histogram("test_sizes", buckets=(1.0, 10.0))
    for v in (0.5, 1.0, 5.0, 50.0):
        h.observe(v)
    g = metrics.gauge("test_level")
    g.set(5)
    g.inc(2)
    g.dec()
    snap = {s.name: s for s in metrics.snapshot()}
    assert snap["test_sizes"].buckets == ((1.0, 2), (10.0, 3), (float("inf"), 4))
    assert snap["test_sizes"].value == 56.5 and snap["test_sizes"].count == 4
    assert metrics.value("test_level") == 6


def test_the_store_caps_series_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    """Past max_series a new series is dropped (counted, one warning per family); older ones still count."""
    store = Store(max_series=2)
    fam = store.declare(Family("c_total", "counter", labels=("k",)))
    cells = [store.cell(fam, (str(i),)) for i in range(4)]
    with caplog.at_level(logging.WARNING, logger="conveyor.metrics"):
        for key, cell in cells:
            store.add(key, cell, 1)
        store.cell(fam, ("9",))
    assert store.dropped == 3 and len(store.cells) == 2
    assert sum("maximum of 2 series" in r.getMessage() for r in caplog.records) == 1
    _, samples = store.collect()
    assert sorted(values for _, values, _ in samples) == [("0",), ("1",)]


def test_updates_from_many_threads_are_not_lost() -> None:
    """Sync handlers run in threads: concurrent increments all count."""
    series = _CALLS.labels("threads")

    def work() -> None:
        for _ in range(5000):
            series.inc()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert metrics.value("test_calls_total", kind="threads") == 20000


def test_aggregate_sums_counters_keeps_gone_children_and_combines_gauges() -> None:
    """Counters and histograms sum over children (a gone child's totals kept); gauges by mode, live only."""
    agg = CustomMetrics()
    c = Family("sent_total", "counter")
    h = Family("t_seconds", "histogram", buckets=(1.0,))
    gauges = [Family("open", "gauge"), Family("peak", "gauge", mode="max"), Family("v", "gauge", mode="last")]
    fams = [c, h, *gauges]
    agg.update("a-0", fams, [("sent_total", (), [3]), ("t_seconds", (), [0.5, 1, 0]), ("open", (), [2]),
                             ("peak", (), [7]), ("v", (), [1])])  # fmt: skip
    agg.update("a-1", fams, [("sent_total", (), [4]), ("t_seconds", (), [9.0, 0, 1]), ("open", (), [5]),
                             ("peak", (), [3]), ("v", (), [2])])  # fmt: skip
    agg.update("a-0", [], [("sent_total", (), [5])])  # cumulative: replaces a-0's 3
    values = agg.values()
    assert values[("sent_total", ())] == [9]
    assert values[("t_seconds", ())] == [9.5, 1, 1]
    assert values[("open", ())] == [7] and values[("peak", ())] == [7] and values[("v", ())] == [2]
    agg.retire("a-0")  # recycled
    agg.update("a-2", [], [("sent_total", (), [1])])
    values = agg.values()
    assert values[("sent_total", ())] == [10]  # 5 (gone a-0) + 4 + 1: never backwards
    assert values[("open", ())] == [5] and values[("peak", ())] == [3]  # a-0's gauges no longer count
    agg.retire("a-1")
    agg.retire("a-2")
    values = agg.values()
    assert values[("sent_total", ())] == [10] and values[("t_seconds", ())] == [9.5, 1, 1]
    assert ("open", ()) not in values and values[("v", ())] == [2]  # "last" outlives its child


def test_aggregate_caps_series_and_drops_conflicting_declarations(caplog: pytest.LogCaptureFixture) -> None:
    """The supervisor holds at most max_series; a child declaring a family differently is ignored for it."""
    agg = CustomMetrics(max_series=2)
    fam = Family("k_total", "counter", labels=("k",))
    with caplog.at_level(logging.WARNING, logger="conveyor.runtime.metrics"):
        agg.update("a-0", [fam], [("k_total", (str(i),), [1]) for i in range(5)], dropped=4)
        agg.update("a-1", [Family("k_total", "gauge", labels=("k",))], [("k_total", ("0",), [100])])
        agg.update("a-2", [Family("conveyor_x", "counter")], [("conveyor_x", (), [1])])
    assert len(agg.values()) == 2 and agg.values()[("k_total", ("0",))] == [1]
    assert agg.total_dropped() == 3 + 4
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "maximum of 2" in messages and "differently" in messages and "bad metric declaration" in messages
    agg.retire("a-0")
    assert agg.total_dropped() == 3 + 4  # a gone child's drops stay counted


def test_a_child_report_crosses_the_pipe_and_renders() -> None:
    """A MetricsReport frame decodes to what the supervisor aggregates and exports, HELP and TYPE included."""
    frame = MetricsReport(
        [MetricFamilyMsg("jobs_total", "counter", 'Jobs "done"\\.', ["q"], [], "sum")],
        [("jobs_total", ['a"b'], [2.0])],
        0,
    )
    (decoded,) = FrameReader().feed(encode(frame))
    assert isinstance(decoded, MetricsReport)
    m = Metrics()

    class Child:
        name = "default-0"

    m.child_metrics(Child(), decoded)  # type: ignore[arg-type]
    text = m.render()
    assert '# HELP jobs_total Jobs "done"\\\\.' in text
    assert "# TYPE jobs_total counter" in text
    assert 'jobs_total{q="a\\"b"} 2' in text
    assert "conveyor_custom_series_dropped_total 0" in text


def test_store_collect_sends_only_changes_and_announces_families_once() -> None:
    """collect() returns the changed series with cumulative values, and each family's declaration once."""
    store = Store()
    fam = store.declare(Family("n_total", "counter"))
    key, cell = store.cell(fam, ())
    store.add(key, cell, 2)
    families, samples = store.collect()
    assert families == [fam] and samples == [("n_total", (), [2.0])]
    assert store.collect() == ([], [])
    store.add(key, cell, 1)
    assert store.collect() == ([], [("n_total", (), [3.0])])
    assert STORE is not store


def test_app_runner_handlers_record_in_process() -> None:
    """Under AppRunner (an in-process Worker against a real server) the calls record into this process."""
    server = start_server()
    try:

        async def main() -> None:
            async with AppRunner(_app, server.url) as runner:
                for n in (1, 4):
                    await runner.enqueue(_metered, n)
                result = await runner.run_until_idle(timeout=20)
            assert all(r.ok for r in result.tasks)

        asyncio.run(main())
    finally:
        server.stop()
    assert metrics.value("test_calls_total", kind="metered") == 5


def test_unregistered_types_share_the_other_label() -> None:
    """A task type no child registered is counted as type="other": producers cannot grow the series."""
    m = Metrics(types={"known"})

    def job(type_: str) -> Job:
        task = TaskData("t1", "q", type_, b"", "", {}, 0, 0)
        return Job(job_id="t1", queue="q", type=type_, tasks=(task,), batch=False, deadline=None)

    for type_ in ("known", "made-up-1", "made-up-2"):
        m.job_started(job(type_))
        m.job_finished(job(type_), [Outcome(OutcomeKind.RETRY, "x")], 0.01)
    text = m.render()
    assert 'conveyor_tasks_total{type="known",queue="q",outcome="retry"} 1' in text
    assert 'conveyor_tasks_total{type="other",queue="q",outcome="retry"} 2' in text
    assert 'conveyor_worker_archived_total{type="other"} 2' in text  # max_retry 0: no retry left
    assert "made-up" not in text


def test_the_supervisors_own_untouched_gauges_do_not_skew_children() -> None:
    """With children reporting, the supervisor's own gauge (declared by importing the app) is not a source."""
    local = Store()
    fam = local.declare(Family("low", "gauge", mode="min"))
    agg = CustomMetrics(local=local)
    assert agg.values()[("low", ())] == [0]  # in-process: the local value is the value
    agg.update("default-0", [fam], [("low", (), [5.0])])
    agg.update("default-1", [], [("low", (), [7.0])])
    assert agg.values()[("low", ())] == [5]
