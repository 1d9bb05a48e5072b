"""`conveyor info`, `enqueue-tx`, `tasks purge`, `enqueue --app` and the fixes to existing commands."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.types import TaskState
from conveyor_sdk.worker import Registry, TaskContext, TaskData
from tests._util import wait_until
from tests.cli_client._helpers import assert_one_line_error, run, run_json, uid
from tests.cli_client._worker import worker_thread


def test_info_table_and_json(url: str) -> None:
    """info reports the server version (Welcome handshake), nodes, broker metrics and queue totals."""
    queue = uid("q")
    run_json(url, "enqueue", "t", "-q", queue)
    data = run_json(url, "info")
    assert data["server"] == url and data["server_version"] and data["min_sdk_version"]
    assert data["client_version"].startswith("conveyor-py/")
    assert data["nodes"] and data["nodes"][0]["started_at"].endswith("Z")
    assert data["broker"]["driver"] == "memory" and int(data["broker"]["metrics"]["tasks"]) >= 1
    assert data["queues"]["count"] >= 1 and data["queues"]["totals"]["pending"] >= 1
    assert data["sessions"] == 0  # the version probe session is gone again
    skipped = run_json(url, "info", "--no-version")
    assert skipped["server_version"] is None
    table = run(url, "info")
    assert (
        table.exit_code == 0 and data["server_version"] in table.stdout and "worker sessions" in table.stdout
    )


def test_enqueue_tx_prints_committed_ids(url: str, tmp_path: Path) -> None:
    """enqueue-tx commits every line atomically and shows each committed id by line."""
    queue = uid("q")
    path = tmp_path / "tx.jsonl"
    path.write_text("".join(json.dumps({"type": t, "queue": queue}) + "\n" for t in ("a", "b", "c")))
    rows = run_json(url, "enqueue-tx", "--file", str(path))
    assert [(r["line"], r["task"]["type"]) for r in rows] == [(1, "a"), (2, "b"), (3, "c")]
    table = run(url, "enqueue-tx", "-f", str(path))
    assert table.exit_code == 0 and "enqueued 3 task(s) atomically" in table.stdout
    with SyncClient(url) as client:
        stored = {t.id for t in client.admin.iter_tasks(queue=queue)}
    assert {r["task"]["id"] for r in rows} <= stored and len(stored) == 6
    second = stored - {r["task"]["id"] for r in rows}
    assert len(second) == 3 and all(tid in table.stdout for tid in second)
    key = uid("u")
    collide = run(
        url,
        "enqueue-tx",
        "-f",
        "-",
        input=f'{{"type": "a", "unique_key": "{key}", "queue": "{queue}"}}\n' * 2,
    )
    assert_one_line_error(collide, "already_exists")


def _archived(client: SyncClient, queue: str, count: int) -> list[str]:
    ids = [client.enqueue("t", None, queue=queue, process_in=3600).id for _ in range(count)]
    for tid in ids:
        client.admin.archive_task(tid)
    return ids


def test_tasks_purge_needs_yes_off_a_tty(url: str) -> None:
    """Without a terminal purge refuses unless --yes; with --yes it deletes only the named state."""
    queue = uid("q")
    with SyncClient(url) as client:
        archived = _archived(client, queue, 3)
        keep = client.enqueue("t", None, queue=queue).id
    refused = run(url, "tasks", "purge", "-q", queue, "-s", "archived")
    assert_one_line_error(refused, "refusing to delete 3 archived task(s)")
    result = run_json(url, "tasks", "purge", "-q", queue, "-s", "archived", "--yes")
    assert result == {"queue": queue, "state": "archived", "matched": 3, "deleted": 3, "failed": []}
    with SyncClient(url) as client:
        left = [t.id for t in client.admin.iter_tasks(queue=queue)]
    assert left == [keep] and not set(archived) & set(left)
    table = run(url, "tasks", "purge", "-q", queue, "-s", "archived", "-y")
    assert table.exit_code == 0 and "deleted 0 of 0 archived task(s)" in table.stdout


def _purge_on_a_pty(url: str, queue: str, answer: bytes) -> tuple[int, str]:
    """Run `tasks purge` with a pseudo-terminal as stdin/stdout, answer the prompt, return (code, output)."""
    main, child_end = pty.openpty()
    cmd = [
        sys.executable,
        "-m",
        "conveyor_cli",
        "tasks",
        "purge",
        "-q",
        queue,
        "-s",
        "archived",
        "--server",
        url,
    ]
    proc = subprocess.Popen(cmd, stdin=child_end, stdout=child_end, stderr=child_end)
    os.close(child_end)
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while b"[y/N]" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if ready:
                seen += os.read(main, 4096)
        os.write(main, answer + b"\n")
        code = proc.wait(30)
        with contextlib.suppress(OSError):  # the pty reports EIO once the child is gone
            while select.select([main], [], [], 0.2)[0]:
                chunk = os.read(main, 4096)
                if not chunk:
                    break
                seen += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(main)
    return code, seen.decode(errors="replace")


def test_tasks_purge_confirms_on_a_tty(url: str) -> None:
    """On a terminal purge asks; 'n' deletes nothing (exit 1), 'y' deletes (a real pty, a real process)."""
    queue = uid("q")
    with SyncClient(url) as client:
        _archived(client, queue, 2)
    code, out = _purge_on_a_pty(url, queue, b"n")
    assert code == 1 and "Delete 2 archived task(s) from queue" in out and "aborted" in out
    with SyncClient(url) as client:
        assert len(list(client.admin.iter_tasks(queue=queue))) == 2
    code, out = _purge_on_a_pty(url, queue, b"y")
    assert code == 0 and "deleted 2 of 2 archived task(s)" in out
    with SyncClient(url) as client:
        assert list(client.admin.iter_tasks(queue=queue)) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("tasks", "purge", "-q", "no-such-queue", "-s", "completed", "-y"), "unknown queue 'no-such-queue'"),
        (("tasks", "purge", "-q", "q", "-s", "pending", "-y"), "purge only deletes finished tasks"),
        (("tasks", "purge", "-q", "q", "-s", "sleepy", "-y"), "unknown task state"),
        (("enqueue-tx", "-f", "/no/such/file.jsonl"), "cannot read"),
    ],
)
def test_purge_and_tx_bad_input(url: str, args: tuple[str, ...], message: str) -> None:
    """Unknown queue, a non-terminal state, a missing file: one `error:` line, exit 1."""
    assert_one_line_error(run(url, *args), message)


def test_multi_id_cancel_cancels_active_tasks_like_single_id(url: str) -> None:
    """`tasks cancel A B` with A active sends it the best-effort Cancel, exactly as `tasks cancel A` would."""
    queue = uid("q")
    reg = Registry()

    @reg.handler("hold")
    async def hold(task: TaskData, ctx: TaskContext) -> None:
        await ctx.until_cancelled()
        raise RuntimeError("stopped by cancel")

    with SyncClient(url) as client, worker_thread(url, reg, [queue]):
        active = client.enqueue("hold", None, queue=queue, retention=3600).id
        wait_until(lambda: client.get_task(active).state is TaskState.ACTIVE, timeout=20, what="active")
        waiting = client.enqueue("hold", None, queue=queue, process_in=3600).id
        rows = run_json(url, "tasks", "cancel", active, waiting)
        assert rows == [{"id": active, "error": ""}, {"id": waiting, "error": ""}]
        final = wait_until(
            lambda: client.get_task(active).state.is_terminal and client.get_task(active), timeout=20
        )
        assert final.state is TaskState.ARCHIVED and "cancel" in final.last_error
        assert client.get_task(waiting).state is TaskState.CANCELED


def test_tables_are_full_width_off_a_tty(url: str) -> None:
    """Piped tables keep each row on one line (no folding at 80 columns)."""
    queue = uid("q")
    with SyncClient(url) as client:
        tid = client.enqueue("t", None, queue=queue, process_in=3600).id
        client.admin.archive_task(tid)
    result = run(url, "tasks", "ls", "-q", queue)
    rows = [line for line in result.stdout.splitlines() if tid in line]
    assert len(rows) == 1 and len(rows[0]) > 80, result.stdout


def test_enqueue_batch_reports_every_bad_line(url: str) -> None:
    """Every bad line is listed with its number and reason; nothing is sent."""
    queue = uid("q")
    text = "\n".join([
        json.dumps({"type": "ok", "queue": queue}),
        json.dumps({"type": "a", "priority": 99}),
        "{oops",
        json.dumps({"type": "c", "queue": "bad queue"}),
        json.dumps({"payload": 1}),
    ]) + "\n"  # fmt: skip
    result = run(url, "enqueue-batch", "-f", "-", input=text)
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == ["line 2", "line 3", "line 4", "line 5"]
    assert "priority" in lines[0] and "invalid queue name" in lines[2] and '"type"' in lines[3]
    assert lines[-1] == "error: 4 bad lines in stdin; nothing was sent"
    with SyncClient(url) as client:
        assert client.admin.list_tasks(queue=queue).tasks == ()


def test_queues_pause_unknown_queue_warns_but_pauses(url: str) -> None:
    """Pausing a queue nobody uses yet warns on stderr and still pauses it; a known queue does not warn."""
    queue = uid("q")
    result = run(url, "queues", "pause", queue)
    assert result.exit_code == 0 and result.stderr.startswith("warning:") and "no tasks" in result.stderr
    assert next(q for q in run_json(url, "queues", "ls") if q["name"] == queue)["paused"] is True
    again = run(url, "queues", "pause", queue)
    assert again.exit_code == 0 and "warning" not in again.stderr
    assert run_json(url, "queues", "resume", queue) == {"queue": queue, "paused": False}


APP = """
import msgspec
from conveyor_sdk.app import App

app = App()


class Fib(msgspec.Struct):
    n: int


@app.task("shop:fib", queue="{queue}", max_retry=5, priority=7, retention=3600)
def fib(payload: Fib, ctx) -> int:
    return payload.n
"""


def test_enqueue_with_app_applies_declared_options(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--app routes to the declared queue with declared defaults; flags win; payloads are validated."""
    queue, module = uid("q"), f"shop_{uid('m').replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(APP.format(queue=queue)))
    monkeypatch.syspath_prepend(str(tmp_path))
    task = run_json(url, "enqueue", "shop:fib", "--app", f"{module}:app", "--json", '{"n": 30}')
    assert (task["queue"], task["max_retry"], task["priority"]) == (queue, 5, 7)
    assert task["payload"] == {"n": 30} and task["content_type"] == "application/json"
    override = run_json(url, "enqueue", "shop:fib", "--app", f"{module}:app", "--json", '{"n": 1}', "-p", "2")
    assert (override["queue"], override["priority"]) == (queue, 2)
    assert_one_line_error(
        run(url, "enqueue", "shop:fib", "--app", f"{module}:app", "--json", "30"),
        "payload does not match Fib",
    )
    assert_one_line_error(
        run(url, "enqueue", "shop:nope", "--app", f"{module}:app"), "declares no task type 'shop:nope'"
    )
    assert_one_line_error(
        run(url, "enqueue", "x", "--app", "no_such_module_xyz:app"), "cannot import app module"
    )
    with SyncClient(url) as client:
        assert len(client.admin.list_tasks(queue=queue).tasks) == 2
