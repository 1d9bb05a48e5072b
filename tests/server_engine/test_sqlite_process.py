"""``--db`` as an operator meets it: start-up lines, one-line errors, schema versions, cron after SIGKILL."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1.service_connect import AdminServiceClientSync, TaskServiceClientSync
from conveyor_server_min._engine.store import MIGRATIONS, StoreError, open_database, schema_version
from conveyor_server_min.testing import ServerProcess
from tests._util import wait_until


def _run_server(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "conveyor_server_min", "--dev", "--port", "0", *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60, env=env)


def _one_line_error(out: subprocess.CompletedProcess[str], text: str) -> None:
    assert out.returncode == 1, out
    lines = out.stderr.strip().splitlines()
    assert "Traceback" not in out.stderr, out.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], out.stderr


def test_startup_names_the_store(tmp_path: Path) -> None:
    """Memory says it is not durable; --db and CONVEYOR_DB name the SQLite file."""
    with ServerProcess([]) as mem:
        assert any("store: memory (NOT durable" in line for line in mem.output)
    with ServerProcess(["--db", str(tmp_path / "a.db")]) as flag:
        assert any(f"store: sqlite {tmp_path / 'a.db'}" in line for line in flag.output)
    env = dict(os.environ, CONVEYOR_DB=str(tmp_path / "b.db"))
    with ServerProcess([], env=env) as by_env:
        assert any(f"store: sqlite {tmp_path / 'b.db'}" in line for line in by_env.output)
    assert (tmp_path / "b.db").exists()


def test_locked_by_another_server(tmp_path: Path) -> None:
    """A second server on a file in use exits 1 with one line naming the lock."""
    db = str(tmp_path / "l.db")
    with ServerProcess(["--db", db]):
        _one_line_error(_run_server("--db", db), "is locked by another process")


def test_corrupt_foreign_newer_and_unwritable_files(tmp_path: Path) -> None:
    """Corrupt, not ours, newer schema, and an unwritable path: one line each, exit 1, no traceback."""
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a database" * 100)
    _one_line_error(_run_server("--db", str(corrupt)), "corrupt or not a SQLite database")
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE other (x)")
    _one_line_error(_run_server("--db", str(foreign)), "was not created by conveyor")
    newer = tmp_path / "newer.db"
    open_database(str(newer), (*MIGRATIONS, "CREATE TABLE later (x)")).close()
    _one_line_error(_run_server("--db", str(newer)), "newer than this server supports")
    bad_settings = tmp_path / "settings.db"
    conn = open_database(str(bad_settings))
    conn.execute("INSERT INTO settings (key, value) VALUES ('cron', x'c1')")
    conn.close()
    _one_line_error(_run_server("--db", str(bad_settings)), "is corrupt: settings")
    _one_line_error(_run_server("--db", str(tmp_path / "missing" / "x.db")), "does not exist")
    _one_line_error(_run_server("--db", "/proc/conveyor-test.db"), "not writable")


def test_older_schema_is_upgraded_in_place(tmp_path: Path) -> None:
    """A v1 file opened by a build with a v2 migration is upgraded and keeps its rows."""
    path = str(tmp_path / "old.db")
    conn = open_database(path)
    conn.execute("INSERT INTO settings (key, value) VALUES ('k', x'01')")
    conn.close()
    conn = open_database(path, (*MIGRATIONS, "ALTER TABLE settings ADD COLUMN note TEXT"))
    assert schema_version(conn) == len(MIGRATIONS) + 1
    assert conn.execute("SELECT key, value, note FROM settings").fetchall() == [("k", b"\x01", None)]
    conn.close()
    with pytest.raises(StoreError, match="newer than this server supports"):
        open_database(path)


def test_cron_fires_on_schedule_after_sigkill(tmp_path: Path) -> None:
    """A cron entry armed before a SIGKILL keeps firing every slot after the restart on the same file."""
    db = str(tmp_path / "cron.db")
    args = ["--db", db, "--promote-interval", "100ms"]
    server = ServerProcess(args)
    server.start()
    try:
        admin = AdminServiceClientSync(server.url, send_compression=None)
        entry = pb.CronEntry(id="every-second", spec="* * * * * *", task_type="tick", queue="cq")
        entry.options.retention.seconds = 3600
        admin.upsert_cron(pb.UpsertCronRequest(entry=entry))
        wait_until(lambda: _cron_tasks(server.url), timeout=15, what="a first cron task")
        assert server.proc is not None
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(10)
        server._close_pipe()
        restarted_at = time.time()
        server = ServerProcess(args)
        server.start()
        listed = AdminServiceClientSync(server.url, send_compression=None).list_cron(pb.ListCronRequest())
        assert [e.id for e in listed.entries] == ["every-second"]

        def fired_after_restart() -> list[float]:
            return [t for t in _cron_tasks(server.url) if t >= restarted_at]

        after = wait_until(lambda: len(fired_after_restart()) >= 2 and fired_after_restart(), timeout=20)
        seconds = [int(t) for t in _cron_tasks(server.url)]
        assert len(seconds) == len(set(seconds)), "a slot fired twice"
        assert all(abs(t - round(t)) < 0.5 for t in after)
    finally:
        assert server.stop() == 0


def _cron_tasks(url: str) -> list[float]:
    admin = AdminServiceClientSync(url, send_compression=None)
    tasks = admin.list_tasks(pb.ListTasksRequest(queue="cq", limit=1000)).tasks
    client = TaskServiceClientSync(url, send_compression=None)
    assert all(client.get_task(pb.GetTaskRequest(id=t.id)).task.type == "tick" for t in tasks[:1])
    return sorted(t.enqueued_at.seconds + t.enqueued_at.nanos / 1e9 for t in tasks)
