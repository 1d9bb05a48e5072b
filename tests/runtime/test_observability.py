"""Metrics aggregation and exposition, the reload watcher's snapshots, log formats, the live view."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest
from rich.console import Console

from conveyor_sdk._runtime.live import render
from conveyor_sdk._runtime.logs import JsonFormatter, TextFormatter
from conveyor_sdk._runtime.metrics import Metrics, MetricsServer
from conveyor_sdk._runtime.reload import app_directory, changed_files, snapshot
from conveyor_sdk._runtime.supervisor import Supervisor, SupervisorConfig
from conveyor_sdk._worker.executor import Job, Outcome, OutcomeKind
from conveyor_sdk._worker.registry import Registry


def _job(queue: str = "q", type_: str = "t") -> Job:
    return Job(job_id="j", queue=queue, type=type_, tasks=(), batch=False, deadline=None)


def test_metrics_render_counts_outcomes_histogram_and_restarts() -> None:
    """Counters by type/queue/outcome, cumulative histogram buckets, in-flight gauge and restarts."""
    m = Metrics(clock=lambda: 100.0)
    m.job_started(_job())
    m.job_finished(_job(), [Outcome(OutcomeKind.SUCCESS)], 0.02)
    m.job_started(_job())
    m.job_finished(_job(), [Outcome(OutcomeKind.RETRY, "x"), Outcome(OutcomeKind.RETRY, cancelled=True)], 7.0)
    m.child_restarted(None, "SIGKILL")  # type: ignore[arg-type]
    m.child_restarted(None, "recycled")  # type: ignore[arg-type]
    text = m.render(children=2)
    assert 'conveyor_tasks_total{type="t",queue="q",outcome="success"} 1' in text
    assert 'conveyor_tasks_total{type="t",queue="q",outcome="retry"} 1' in text
    assert 'conveyor_tasks_total{type="t",queue="q",outcome="canceled"} 1' in text
    assert 'conveyor_task_duration_seconds_bucket{type="t",queue="q",outcome="success",le="0.025"} 1' in text
    assert 'conveyor_task_duration_seconds_bucket{type="t",queue="q",outcome="mixed",le="5.0"} 0' in text
    assert 'conveyor_task_duration_seconds_bucket{type="t",queue="q",outcome="mixed",le="10.0"} 1' in text
    assert 'conveyor_task_duration_seconds_bucket{type="t",queue="q",outcome="mixed",le="+Inf"} 1' in text
    assert 'conveyor_task_duration_seconds_count{type="t",queue="q",outcome="success"} 1' in text
    assert 'conveyor_tasks_in_flight{queue="q"} 0' in text
    assert 'conveyor_child_restarts_total{reason="crashed"} 1' in text
    assert 'conveyor_child_restarts_total{reason="recycled"} 1' in text
    assert "conveyor_children 2" in text
    assert m.failures == 2  # the timed-out (cancelled RETRY) attempt counts as well
    assert m.rate(window=5) == 3 / 5
    m.job_finished(_job(), [Outcome(OutcomeKind.RELEASED, "worker draining", cancelled=True)], 0.1)
    assert m.failures == 2  # a drained attempt is released, not failed


def test_label_values_are_escaped() -> None:
    """Quotes, backslashes and newlines in task types cannot break the exposition format."""
    m = Metrics()
    m.job_finished(_job(type_='a"b\\c\nd'), [Outcome(OutcomeKind.SUCCESS)], 0.1)
    assert 'type="a\\"b\\\\c\\nd"' in m.render()


def test_metrics_server_serves_404_and_405() -> None:
    """Unknown paths are 404, non-GET methods 405; /healthz and /readyz reflect their own callbacks."""

    async def main() -> None:
        ready = (False, "pool fast: session not connected")
        server = MetricsServer(lambda: "x 1\n", lambda: (True, "ok"), ready=lambda: ready)
        port = await server.start()
        try:
            for request, status in (
                (b"GET /nope HTTP/1.1\r\n\r\n", b"404"),
                (b"POST /metrics HTTP/1.1\r\n\r\n", b"405"),
                (b"GET /healthz HTTP/1.1\r\n\r\n", b"200"),
                (b"GET /readyz HTTP/1.1\r\n\r\n", b"503"),
                (b"GET /metrics HTTP/1.1\r\n\r\n", b"200"),
            ):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(request)
                reply = await reader.read()
                writer.close()
                await writer.wait_closed()
                assert reply.split(b" ")[1] == status
        finally:
            await server.close()

    asyncio.run(main())


def test_snapshot_sees_edits_additions_and_removals(tmp_path: Path) -> None:
    """Changed mtimes, new and deleted .py files are reported; caches and dot folders are skipped."""
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.py").write_text("")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "b.py").write_text("")
    before = snapshot(tmp_path)
    assert list(before) == [str(tmp_path / "a.py")]
    os.utime(tmp_path / "a.py", (1, 1))
    (tmp_path / "c.py").write_text("")
    after = snapshot(tmp_path)
    assert changed_files(before, after) == [str(tmp_path / "a.py"), str(tmp_path / "c.py")]
    (tmp_path / "c.py").unlink()
    assert changed_files(after, snapshot(tmp_path)) == [str(tmp_path / "c.py")]


def test_app_directory_climbs_out_of_packages(tmp_path: Path) -> None:
    """For pkg/sub/mod.py inside packages, the watched folder is the one holding pkg/."""
    sub = tmp_path / "pkg" / "sub"
    sub.mkdir(parents=True)
    for folder in (tmp_path / "pkg", sub):
        (folder / "__init__.py").write_text("")
    assert app_directory(str(sub / "mod.py")) == tmp_path.resolve()
    assert app_directory(str(tmp_path / "single.py")) == tmp_path.resolve()


def test_log_formats_carry_child_and_task_id() -> None:
    """JSON lines and text lines both carry the child tag and the task id."""
    record = logging.LogRecord("conveyor.x", logging.WARNING, __file__, 1, "hello %s", ("you",), None)
    record.child = "default-0:123"
    record.task_id = "T1"
    data = json.loads(JsonFormatter().format(record))
    assert (data["msg"], data["child"], data["task_id"], data["level"]) == (
        "hello you",
        "default-0:123",
        "T1",
        "warning",
    )
    assert "[default-0:123 T1] conveyor.x: hello you" in TextFormatter().format(record)


def test_live_view_renders_without_children() -> None:
    """The live view renders the header, processes and per-queue tables (in-process mode here)."""
    config = SupervisorConfig(
        app="m:app", queues={"a": 3, "b": 1}, concurrency=4, processes=0, server="http://x"
    )
    sup = Supervisor(config, Registry())
    console = Console(record=True, width=120)
    console.print(render(sup))
    text = console.export_text()
    assert "tasks/s" in text and "in flight per queue" in text and "(in-process)" in text
    assert "in-process" in repr(sup)
    assert sup.statistics()["failures"] == 0


def test_log_stream_turns_lines_into_records_per_thread(caplog: pytest.LogCaptureFixture) -> None:
    """LogStream: one record per complete line, partial lines kept per thread, long lines cut, bytes pass."""
    import io
    import threading

    from conveyor_sdk._runtime.output import MAX_LINE, LogStream

    fallback = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    stream = LogStream(logging.getLogger("conveyor.stdout"), logging.INFO, fallback)
    caplog.set_level(logging.INFO, logger="conveyor.stdout")
    stream.write("hello ")
    other = threading.Thread(target=lambda: stream.write("from a thread\n"))
    other.start()
    other.join()
    stream.write("world\nsecond\r\nunfinished")
    assert [r.getMessage() for r in caplog.records] == ["from a thread", "hello world", "second"]
    stream.close_line()
    assert caplog.records[-1].getMessage() == "unfinished"
    stream.write("x" * (MAX_LINE + 1))
    assert caplog.records[-1].getMessage() == "x" * (MAX_LINE + 1)
    assert stream.buffer is fallback.buffer and not stream.isatty()


def test_child_output_frames_records_and_tags_raw_lines() -> None:
    """ChildOutput: framed record lines pass as they are, raw lines get the child tag, nothing is lost."""
    from conveyor_sdk._runtime.output import ChildOutput, mark_record

    out = ChildOutput("default-0:42")
    record = mark_record(
        "12:00 WARNING [default-0:42 T1] shop: boom\nTraceback (most recent call last):\n  x"
    )
    lines = out.feed(record[:10]) + out.feed(record[10:] + "\nraw bytes\npartial")
    assert lines == [
        "12:00 WARNING [default-0:42 T1] shop: boom\n",
        "Traceback (most recent call last):\n",
        "  x\n",
        "[default-0:42] raw bytes\n",
    ]
    assert out.close() == ["[default-0:42] partial\n"] and out.close() == []


def test_take_snapshot_copies_python_files_within_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """take_snapshot: .py files (not venvs or data) are copied with their layout; over the limit: None."""
    from conveyor_sdk._runtime import reload

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("VERSION = 1\n")
    (tmp_path / "data.json").write_text("{}")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "site.py").write_text("")
    copy = reload.take_snapshot(tmp_path)
    assert copy is not None
    try:
        found = sorted(str(p.relative_to(copy)) for p in Path(copy).rglob("*") if p.is_file())
        assert found == ["pkg/__init__.py", "pkg/mod.py"]
        assert (Path(copy) / "pkg" / "mod.py").read_text() == "VERSION = 1\n"
    finally:
        reload.discard_snapshot(copy)
    assert not Path(copy).exists()
    monkeypatch.setattr(reload, "SNAPSHOT_MAX_FILES", 1)
    assert reload.take_snapshot(tmp_path) is None


def test_take_snapshot_removes_copies_left_by_dead_workers(tmp_path: Path) -> None:
    """A copy named after a pid that no longer runs (a SIGKILLed worker) is removed by the next snapshot."""
    import subprocess
    import sys
    import tempfile

    from conveyor_sdk._runtime import reload

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True, text=True
    )
    orphan = Path(tempfile.mkdtemp(prefix=f"conveyor-code-{int(dead.stdout)}-"))
    mine = Path(tempfile.mkdtemp(prefix=f"conveyor-code-{os.getpid()}-"))
    (tmp_path / "m.py").write_text("")
    copy = reload.take_snapshot(tmp_path)
    try:
        assert not orphan.exists() and mine.exists()
    finally:
        reload.discard_snapshot(copy)
        reload.discard_snapshot(str(mine))
        reload.discard_snapshot(str(orphan))
