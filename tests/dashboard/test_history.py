"""The charts' in-process history: per-minute buckets, bounded, on a virtual clock; task timelines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import markupsafe

from conveyor_cli.dashboard import history as hist
from conveyor_cli.dashboard import views
from conveyor_cli.dashboard.events import EventFeed
from conveyor_cli.dashboard.history import MINUTES, History, chart
from conveyor_cli.dashboard.render import ERROR_LIMIT, duration, shared_env, timeline
from conveyor_sdk.client import TaskEvent, TaskEventType
from conveyor_sdk.types import QueueInfo, TaskInfo, TaskState


class Clock:
    """Virtual wall clock in seconds."""

    def __init__(self) -> None:
        self.now = 1_000_000 * 60.0

    def __call__(self) -> float:
        return self.now


def _event(kind: TaskEventType, queue: str) -> TaskEvent:
    return TaskEvent(event_type=kind, id="t", queue=queue, type="job", state=TaskState.PENDING)


def test_minutes_count_done_and_failed_per_queue_and_overall() -> None:
    """Completed events are throughput, retried/archived are failures; old minutes slide out after an hour."""
    clock = Clock()
    h = History(clock)
    for kind, queue in [(TaskEventType.COMPLETED, "a"), (TaskEventType.COMPLETED, "b")]:
        h.event(_event(kind, queue))
    h.event(_event(TaskEventType.RETRIED, "a"))
    h.event(_event(TaskEventType.LEASED, "a"))  # neither
    clock.now += 60
    h.event(_event(TaskEventType.ARCHIVED, "a"))
    h.event(_event(TaskEventType.COMPLETED, "a"))
    overall, a = h.series(""), h.series("a")
    assert len(overall["done"]) == MINUTES
    assert overall["done"][-2:] == [2, 1] and overall["failed"][-2:] == [1, 1]
    assert a["done"][-2:] == [1, 1] and a["failed"][-2:] == [1, 1]
    assert h.series("b")["done"][-2:] == [1, 0]
    clock.now += 60 * (MINUTES - 1)
    assert sum(h.series("")["done"]) == 1  # the first minute is out of the window now
    clock.now += 60
    assert sum(h.series("")["done"]) == 0


def test_depth_is_the_waiting_states_and_none_where_unsampled() -> None:
    """Depth sums scheduled/pending/retry/aggregating/blocked (not active or done); gaps stay gaps."""
    clock = Clock()
    h = History(clock)
    counts = {TaskState.PENDING: 3, TaskState.SCHEDULED: 2, TaskState.ACTIVE: 7, TaskState.COMPLETED: 9}
    h.depth([QueueInfo("a", False, counts), QueueInfo("b", False, {TaskState.RETRY: 1})])
    clock.now += 120
    h.depth([QueueInfo("a", False, {TaskState.PENDING: 1})])
    overall, a = h.series("")["depth"], h.series("a")["depth"]
    assert overall[-3:] == [6, None, 1]
    assert a[-3:] == [5, None, 1]
    assert h.series("b")["depth"][-1] is None


def test_memory_is_bounded_in_minutes_and_queues() -> None:
    """At most MINUTES + 1 buckets are kept and at most MAX_QUEUES queues per bucket (overall stays exact)."""
    clock = Clock()
    h = History(clock)
    for i in range(hist.MAX_QUEUES + 50):
        h.event(_event(TaskEventType.COMPLETED, f"q{i}"))
    for _ in range(3 * MINUTES):
        clock.now += 60
        h.event(_event(TaskEventType.COMPLETED, "x"))
    assert len(h._buckets) == MINUTES + 1
    h2 = History(clock)
    for i in range(hist.MAX_QUEUES + 50):
        h2.event(_event(TaskEventType.COMPLETED, f"q{i}"))
    bucket = h2._buckets[-1]
    assert len(bucket.done) <= hist.MAX_QUEUES + 1
    assert bucket.done[""] == hist.MAX_QUEUES + 50


def test_chart_points_scale_to_the_peak_and_skip_gaps() -> None:
    """Points are numbers in the box (peak at the top), None values are left out."""
    c = chart([0, 5, None, 10], width=300, height=80)
    assert c["peak"] == 10 and c["last"] == 10
    points = [tuple(map(float, p.split(","))) for p in c["points"].split()]
    assert [x for x, _ in points] == [0.0, 100.0, 300.0]
    assert points[0][1] == 78.0 and points[-1][1] == 2.0
    assert chart([None, None])["points"] == "" and chart([0, 0])["peak"] == 0
    assert c["end"] == ["300.0", "2.0"] and chart([None])["end"] is None


def test_timeline_run_time_wait_and_bounded_error() -> None:
    """Timestamps in order with gaps; run time = finished - started; wait from due; the error is bounded."""
    t0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    info = TaskInfo(
        id="t",
        queue="q",
        type="job",
        state=TaskState.COMPLETED,
        retried=2,
        max_retry=5,
        last_error="x" * (ERROR_LIMIT + 10),
        enqueued_at=t0,
        process_at=t0 + timedelta(seconds=10),
        started_at=t0 + timedelta(seconds=12),
        completed_at=t0 + timedelta(seconds=12.5),
    )
    out = timeline(info)
    assert [s["label"] for s in out["timeline"]] == ["enqueued", "due", "started", "finished"]
    assert [s["gap"] for s in out["timeline"]] == [None, 10.0, 2.0, 0.5]
    assert out["run_time"] == 0.5 and out["wait_time"] == 2.0 and out["attempt"] == 3
    assert len(out["error_text"]) == ERROR_LIMIT and out["error_length"] == ERROR_LIMIT + 10
    assert duration(0.5) == "500 ms" and duration(12.34) == "12.3 s" and duration(245) == "4m 05s"
    assert duration(7380) == "2h 03m" and duration(None) == "—"


def test_cached_charts_are_rebuilt_when_data_or_minute_changes() -> None:
    """The cache serves an unchanged hour; a new event, a new depth or a new minute rebuilds it."""
    clock = Clock()
    h = History(clock)
    builds: list[int] = []

    def build(series: dict[str, list[int | None]]) -> int:
        builds.append(1)
        return sum(v or 0 for v in series["done"])

    assert h.cached("", build) == 0 and h.cached("", build) == 0 and len(builds) == 1
    h.depth([QueueInfo("a", False, {TaskState.PENDING: 1})])
    h.depth([QueueInfo("a", False, {TaskState.PENDING: 1})])  # unchanged: no rebuild
    h.cached("", build)
    assert len(builds) == 2
    h.event(_event(TaskEventType.COMPLETED, "a"))
    assert h.cached("", build) == 1 and len(builds) == 3
    clock.now += 60
    assert h.cached("", build) == 1 and len(builds) == 4


def test_chart_html_is_rendered_once_per_change_and_embeds_unescaped() -> None:
    """views.charts returns one rendered SVG block per change of data (not per page view), as Markup."""
    feed = EventFeed(cast(Any, None), 10)  # never started: no client is needed
    first = views.charts(feed, "")
    assert views.charts(feed, "") is first  # the second page view re-uses the rendering
    assert isinstance(first, markupsafe.Markup) and first.count("<svg") == 3 and "now 0" in first
    feed.add(_event(TaskEventType.COMPLETED, "a"))
    after = views.charts(feed, "")
    assert after is not first and "now 1 · peak 1" in after and "<polyline" in after
    assert views.charts(feed, "a") is not after and "now 1" in views.charts(feed, "a")
    page = shared_env().from_string("<main>{{ charts }}</main>").render(charts=after)
    assert page == f"<main>{after}</main>"  # embedded as is, not escaped a second time
