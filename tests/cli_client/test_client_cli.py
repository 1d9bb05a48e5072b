"""`conveyor enqueue/enqueue-batch/tasks/queues/sessions` through typer's CliRunner against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from conveyor_cli.app import app
from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import TaskState


def uid(prefix: str = "c") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def run(url: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=input, env={"CONVEYOR_ADDR": url, "CONVEYOR_TOKEN": ""})


def run_json(url: str, *args: str, input: str | None = None) -> Any:
    result = run(url, *args, "-o", "json", input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_enqueue_with_flags_and_json_output(url: str) -> None:
    """Every flag reaches the server and -o json prints the committed task."""
    tid, queue = uid(), uid("q")
    task = run_json(
        url, "enqueue", "email:welcome", "--json", '{"user_id": 5, "b": [1]}', "--id", tid, "-q", queue,
        "--meta", "tenant=acme", "--max-retry", "3", "--timeout", "30s", "--deadline", "2099-01-01T00:00:00Z",
        "--process-in", "1m", "--unique-key", uid("u"), "--unique-ttl", "1h", "-p", "8", "--retention", "24h",
        "--expires-in", "2h", "--concurrency-key", "acme", "--retry-strategy", "fixed", "--retry-base", "2s",
        "--retry-max", "1m",
    )  # fmt: skip
    assert task["id"] == tid and task["queue"] == queue and task["state"] == "scheduled"
    assert (task["priority"], task["max_retry"]) == (8, 3)
    assert task["payload"] == {"user_id": 5, "b": [1]} and task["content_type"] == "application/json"
    blocked = run_json(url, "enqueue", "child", "--depends-on", f"{tid}:cascade_cancel", "--group", uid("g"))
    assert blocked["state"] == "blocked"


def test_enqueue_payload_from_file_and_table_output(url: str, tmp_path: Path) -> None:
    """--data-file sends bytes verbatim (octet-stream unless *.json); the default output is a table."""
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00\x01binary")
    task = run_json(url, "enqueue", "blob", "--data-file", str(blob))
    assert task["content_type"] == "application/octet-stream" and "payload_b64" in task
    doc = tmp_path / "doc.json"
    doc.write_text('{"a": 1}')
    table = run(url, "enqueue", "doc", "--data-file", str(doc))
    assert table.exit_code == 0 and "application/json" in table.stdout and "state" in table.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("enqueue", "t", "--json", "{bad"), "--json is not valid JSON"),
        (("enqueue", "t", "--priority", "12"), "--priority must be between 1 and 9, got 12"),
        (("enqueue", "t", "--process-at", "2030-01-01T00:00:00"), "has no timezone"),
        (("enqueue", "t", "--process-in", "soon"), "invalid duration"),
        (("enqueue", "t", "--meta", "novalue"), "use key=value"),
        (("enqueue", "t", "--depends-on", "x:maybe"), "unknown on_failure"),
        (("enqueue", "t", "--group", "g", "--process-in", "1m"), "mutually exclusive"),
        (("enqueue", "t", "-q", "bad queue"), "invalid queue name"),
        (("tasks", "get", "no-such-task"), "task 'no-such-task' not found"),
        (("tasks", "cancel", "no-such-task"), "--retention"),
        (("tasks", "ls", "--state", "sleepy"), "unknown task state"),
        (("tasks", "reschedule", "x"), "exactly one of process_at or process_in"),
        (("queues", "pause", "bad queue"), "invalid queue name"),
    ],
)
def test_user_mistakes_are_one_line_errors(url: str, args: tuple[str, ...], message: str) -> None:
    """Bad input or unknown ids print one `error:` line, exit 1 and show no traceback."""
    result = run(url, *args)
    assert result.exit_code == 1, result.stdout
    assert result.stderr.startswith("error:") and message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout and result.stderr.count("\n") == 1


def test_server_down_is_a_one_line_error() -> None:
    """An unreachable server exits 1 with one line naming the address and --server / CONVEYOR_ADDR."""
    result = CliRunner().invoke(app, ["queues", "ls", "--server", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot reach the server at http://127.0.0.1:9 (")
    assert "check --server / CONVEYOR_ADDR" in result.stderr


def test_tasks_get_ls_and_actions(url: str) -> None:
    """tasks get/ls/run/archive/cancel/delete/reschedule drive the real task states."""
    queue = uid("q")
    ids = [run_json(url, "enqueue", "t", "-q", queue, "--process-in", "1h")["id"] for _ in range(3)]
    assert run_json(url, "tasks", "get", ids[0])["state"] == "scheduled"
    listed = run_json(url, "tasks", "ls", "-q", queue, "--state", "scheduled")
    assert sorted(t["id"] for t in listed) == sorted(ids)
    assert len(run_json(url, "tasks", "ls", "-q", queue, "-n", "1", "--all")) == 3
    assert run(url, "tasks", "run", ids[0]).exit_code == 0
    assert run(url, "tasks", "reschedule", ids[1], "--at", "2099-01-01T00:00:00+02:00").exit_code == 0
    assert run(url, "tasks", "archive", ids[2]).exit_code == 0
    with SyncClient(url) as client:
        states = [client.get_task(i).state for i in ids]
    assert states == [TaskState.PENDING, TaskState.SCHEDULED, TaskState.ARCHIVED]
    mixed = run(url, "tasks", "cancel", ids[0], "no-such-id", "-o", "json")
    assert mixed.exit_code == 1 and "1 of 2 failed" in mixed.stderr
    assert [bool(r["error"]) for r in json.loads(mixed.stdout)] == [False, True]
    assert run(url, "tasks", "delete", ids[0]).exit_code == 0
    assert run(url, "tasks", "get", ids[0]).exit_code == 1


def test_queues_and_sessions(url: str) -> None:
    """queues ls/pause/resume and sessions ls, as tables and JSON."""
    queue = uid("q")
    run_json(url, "enqueue", "t", "-q", queue)
    assert run(url, "queues", "pause", queue).exit_code == 0
    row = next(q for q in run_json(url, "queues", "ls") if q["name"] == queue)
    assert row["paused"] is True and row["pending"] == 1
    assert run(url, "queues", "resume", queue).exit_code == 0
    assert queue in run(url, "queues", "ls").stdout
    assert run_json(url, "sessions", "ls") == []


def test_enqueue_batch_reports_per_line(url: str, tmp_path: Path) -> None:
    """JSONL lines become tasks; a failing line is reported by number and the exit code is 1."""
    key = uid("u")
    lines = [
        {"type": "a", "payload": {"n": 1}, "unique_key": key},
        {"type": "b", "payload_b64": "AAE=", "process_in": "1m", "depends_on": ["x"]},
        {"type": "c", "unique_key": key},
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    result = run(url, "enqueue-batch", "-f", str(path), "-o", "json")
    assert result.exit_code == 1 and "1 task(s) were not enqueued" in result.stderr
    rows = json.loads(result.stdout)
    assert [(r["line"], r["ok"]) for r in rows] == [(1, True), (2, True), (3, False)]
    second = rows[1]["task"]
    assert second["state"] == "blocked" and second["content_type"] == "application/octet-stream"


def test_enqueue_batch_validates_every_line_first(url: str) -> None:
    """A bad line anywhere aborts before anything is sent, naming the line."""
    queue = uid("q")
    text = f'{{"type": "a", "queue": "{queue}"}}\n{{"type": "b", "priority": 99}}\n'
    result = run(url, "enqueue-batch", "-f", "-", input=text)
    assert result.exit_code == 1 and result.stderr.startswith("error: line 2: priority")
    with SyncClient(url) as client:
        assert client.admin.list_tasks(queue=queue).tasks == ()
    bad_json = run(url, "enqueue-batch", "-f", "-", input='{"type": "a"}\n{oops\n')
    assert bad_json.exit_code == 1 and "line 2" in bad_json.stderr


def test_enqueue_batch_chunks_large_files_and_tx(url: str, tmp_path: Path) -> None:
    """2,500 lines go out in chunks of 1000; --tx is atomic and refuses more than 1000 lines."""
    queue = uid("q")
    path = tmp_path / "big.jsonl"
    lines = (json.dumps({"type": "bulk", "queue": queue, "payload": i}) + "\n" for i in range(2500))
    path.write_text("".join(lines))
    result = run(url, "enqueue-batch", "-f", str(path))
    assert result.exit_code == 0 and "enqueued 2500 of 2500" in result.stdout
    with SyncClient(url) as client:
        assert sum(1 for _ in client.admin.iter_tasks(queue=queue, page_size=1000)) == 2500
    too_big = run(url, "enqueue-batch", "-f", str(path), "--tx")
    assert too_big.exit_code == 1 and "at most 1000" in too_big.stderr
    key = uid("u")
    tx = f'{{"type": "a", "unique_key": "{key}"}}\n{{"type": "b", "unique_key": "{key}"}}\n'
    collide = run(url, "enqueue-batch", "-f", "-", "--tx", input=tx)
    assert collide.exit_code == 1 and collide.stderr.startswith("error: already_exists")
    ok = run_json(url, "enqueue-batch", "-f", "-", "--tx", input='{"type": "a"}\n{"type": "b"}\n')
    assert [r["task"]["type"] for r in ok] == ["a", "b"]


def test_console_entry_point_in_a_subprocess(url: str) -> None:
    """The real `python -m conveyor_cli` process enqueues and reads back, honouring CONVEYOR_ADDR."""
    env = {**os.environ, "CONVEYOR_ADDR": url}
    env.pop("CONVEYOR_TOKEN", None)
    cmd = [sys.executable, "-m", "conveyor_cli"]
    made = subprocess.run([*cmd, "enqueue", "sub", "--json", "[1, 2]", "-o", "json"],
                          env=env, capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    tid = json.loads(made.stdout)["id"]
    got = subprocess.run([*cmd, "tasks", "get", tid, "-o", "json"],
                         env=env, capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert json.loads(got.stdout)["payload"] == [1, 2]
    missing = subprocess.run(
        [*cmd, "tasks", "get", "nope"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert missing.returncode == 1 and missing.stderr.startswith("error: task 'nope' not found: ")
    assert "retention" in missing.stderr and missing.stderr.count("\n") == 1
