"""Every `conveyor` operator command against conveyord, in table and JSON form, and every dashboard page."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid

from tests.dashboard.conftest import DashboardProcess


def cli(url: str, *args: str, json_out: bool = False, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `conveyor ARGS --server URL [-o json]`; require exit 0 (or non-zero with ok=False)."""
    cmd = [sys.executable, "-m", "conveyor_cli", *args, "--server", url]
    if json_out:
        cmd += ["-o", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode == 0) == ok, f"{args}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def both(url: str, *args: str) -> object:
    """The command in table form (says something) and JSON form (parsed); returns the JSON."""
    table = cli(url, *args)
    assert (table.stdout + table.stderr).strip(), f"{args}: no output"  # confirmations go to stderr
    return json.loads(cli(url, *args, json_out=True).stdout)


def once(url: str, *args: str, json_out: bool) -> None:
    """A one-shot action (its second run would fail: already removed): one form; JSON must parse."""
    proc = cli(url, *args, json_out=json_out)
    if json_out:
        json.loads(proc.stdout)


def test_task_and_queue_commands(cv_url: str) -> None:
    """enqueue, tasks get/ls/cancel/run/archive/delete/reschedule, queues ls/pause/resume, both forms."""
    q = f"cliq{uuid.uuid4().hex[:6]}"
    made = json.loads(cli(cv_url, "enqueue", "cli:type", "--json", '{"a":1}', "-q", q, json_out=True).stdout)
    tid = made["id"]
    assert both(cv_url, "tasks", "get", tid)["id"] == tid  # type: ignore[index]
    rows = both(cv_url, "tasks", "ls", "-q", q)
    assert tid in json.dumps(rows)
    cli(cv_url, "enqueue", "cli:type", "--json", "{}", "-q", q)
    later = json.loads(cli(cv_url, "enqueue", "cli:t", "-q", q, "--json", "{}", json_out=True).stdout)["id"]
    cli(cv_url, "tasks", "reschedule", later, "--in", "10m")  # no -o: it prints a confirmation only
    once(cv_url, "tasks", "archive", later, json_out=False)
    once(cv_url, "tasks", "run", later, json_out=True)
    once(cv_url, "tasks", "cancel", tid, json_out=False)
    once(cv_url, "tasks", "delete", tid, json_out=True)
    assert q in json.dumps(both(cv_url, "queues", "ls"))
    both(cv_url, "queues", "pause", q)
    both(cv_url, "queues", "resume", q)


def test_batch_tx_and_limits_commands(cv_url: str, tmp_path: object) -> None:
    """enqueue-batch, enqueue-tx, ratelimit, concurrency, group set/ls/rm, sessions ls, info, both forms."""
    from pathlib import Path

    lines = Path(str(tmp_path)) / "tasks.jsonl"
    lines.write_text('{"type": "b1", "payload": {"n": 1}}\n{"type": "b2", "payload": {"n": 2}}\n')
    assert len(both(cv_url, "enqueue-batch", "-f", str(lines))) == 2  # type: ignore[arg-type]
    assert len(both(cv_url, "enqueue-tx", "-f", str(lines))) == 2  # type: ignore[arg-type]
    q = f"limq{uuid.uuid4().hex[:6]}"
    both(cv_url, "ratelimit", "set", q, "--rate", "50/s", "--burst", "10")
    assert q in json.dumps(both(cv_url, "ratelimit", "ls"))
    once(cv_url, "ratelimit", "rm", q, json_out=True)
    both(cv_url, "concurrency", "set", q, "--limit", "3")
    assert q in json.dumps(both(cv_url, "concurrency", "ls"))
    once(cv_url, "concurrency", "rm", q, json_out=False)
    both(cv_url, "group", "set", q, "--max-size", "5", "--max-delay", "2m", "--grace-period", "5s")
    assert q in json.dumps(both(cv_url, "group", "ls"))
    once(cv_url, "group", "rm", q, json_out=True)
    assert isinstance(both(cv_url, "sessions", "ls"), list)
    info = both(cv_url, "info")
    assert "server_version" in json.dumps(info)


def test_cron_commands(cv_url: str) -> None:
    """cron add/ls/get/pause/resume/rm in both forms."""
    cid = f"cron{uuid.uuid4().hex[:6]}"
    spec = "0 */5 * * * *"  # conveyord takes 6-field (seconds first) specs
    once(cv_url, "cron", "add", cid, spec, "cron:type", "--json", "{}", json_out=True)
    assert cid in json.dumps(both(cv_url, "cron", "ls"))
    assert cid in json.dumps(both(cv_url, "cron", "get", cid))
    both(cv_url, "cron", "pause", cid)
    both(cv_url, "cron", "resume", cid)
    once(cv_url, "cron", "rm", cid, json_out=True)


def test_bad_input_is_one_line(cv_url: str) -> None:
    """An unknown task id is a one-line error with a non-zero exit code, no traceback."""
    proc = cli(cv_url, "tasks", "get", "no-such-task", ok=False)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_every_dashboard_page(cv_url: str) -> None:
    """Each dashboard page answers 200 with HTML when the dashboard points at conveyord."""
    tid = json.loads(cli(cv_url, "enqueue", "dash:t", "-q", "dashq", "--json", "{}", json_out=True).stdout)[
        "id"
    ]
    dash = DashboardProcess(cv_url)
    try:
        base = dash.url.rstrip("/")
        for page in [
            "/",
            "/queues/dashq",
            f"/tasks/{tid}",
            "/workers",
            "/cron",
            "/events",
            "/search?q=" + tid,
            "/limits",
        ]:
            with urllib.request.urlopen(base + page, timeout=30) as resp:
                body = resp.read().decode()
                assert resp.status == 200 and "<html" in body.lower(), page
    finally:
        assert dash.stop() == 0
