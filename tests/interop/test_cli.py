"""Every `conveyor` operator command against conveyord, in table and JSON form, and every dashboard page."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Callable

import pytest

from tests._util import wait_until
from tests.dashboard.conftest import DashboardProcess
from tests.interop._conveyord import Conveyord


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


INT32 = "1 and 2147483647"


def _enqueue(url: str, type_: str, q: str) -> str:
    made = json.loads(cli(url, "enqueue", type_, "--json", "{}", "-q", q, json_out=True).stdout)
    return str(made["id"])


def _pages(url: str, *args: str) -> list[list[str]]:
    """Every page of ``tasks ls ARGS -o json --page-info``, following next_page_token to the empty one."""
    pages: list[list[str]] = []
    token = ""
    while len(pages) < 20:
        page = json.loads(
            cli(url, "tasks", "ls", *args, "--page-info", "--page-token", token, json_out=True).stdout
        )
        assert set(page) == {"tasks", "next_page_token"}, page
        pages.append([t["id"] for t in page["tasks"]])
        token = page["next_page_token"]
        if not token:
            return pages
    raise AssertionError(f"more than 20 pages: {pages}")


def test_tasks_ls_page_info_and_type_filter(cv_url: str) -> None:
    """--page-info pages conveyord's listing by its token; --type keeps one type, paged the same way."""
    q = f"pageq{uuid.uuid4().hex[:6]}"
    mails = [_enqueue(cv_url, "page:mail", q) for _ in range(3)]
    reports = [_enqueue(cv_url, "page:report", q) for _ in range(2)]
    pages = _pages(cv_url, "-q", q, "-n", "2")
    seen = [tid for page in pages for tid in page]
    assert sorted(seen) == sorted(mails + reports) and len(pages) >= 3, pages  # each once, 2 per page
    assert all(len(page) <= 2 for page in pages)
    only = json.loads(cli(cv_url, "tasks", "ls", "-q", q, "--type", "page:report", json_out=True).stdout)
    assert sorted(t["id"] for t in only) == sorted(reports) and {t["type"] for t in only} == {"page:report"}
    typed = _pages(cv_url, "-q", q, "--type", "page:mail", "-n", "1")
    assert sorted(tid for page in typed for tid in page) == sorted(mails), typed
    bad = cli(cv_url, "tasks", "ls", "-q", q, "--page-info", ok=False)  # without -o json
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_events_task_type_filter(node_factory: Callable[..., Conveyord]) -> None:
    """events --task-type prints only that task type's events from conveyord's WatchEvents stream."""
    cv_url = node_factory(extra="events:\n  enabled: true\n").url  # conveyord's default: no events
    q = f"evq{uuid.uuid4().hex[:6]}"
    cmd = [sys.executable, "-m", "conveyor_cli", "events", "-q", q, "--task-type", "ev:want", "-o", "json"]
    with subprocess.Popen(
        [*cmd, "--server", cv_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            seen = _filtered_events(cv_url, q, proc)
        finally:
            proc.terminate()
            proc.wait(30)
    assert {e["type"] for e in seen} == {"ev:want"}, seen
    assert {e["queue"] for e in seen} == {q}


def _filtered_events(cv_url: str, q: str, proc: subprocess.Popen[str]) -> list[dict[str, object]]:
    """Enqueue ev:want probes until the stream shows one, then an ev:other and an ev:want; every line."""
    out, err = proc.stdout, proc.stderr
    assert out is not None and err is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in out], daemon=True).start()
    seen: list[dict[str, object]] = []

    def drained() -> list[dict[str, object]]:
        while not lines.empty():
            seen.append(json.loads(lines.get()))
        return seen

    def stream_open() -> bool:
        # "watching" is printed before the stream is open: probe until one probe's event arrives.
        if drained():
            return True
        _enqueue(cv_url, "ev:want", q)
        return False

    assert "watching" in err.readline()
    wait_until(stream_open, timeout=30, interval=0.5, what="the first ev:want event")
    _enqueue(cv_url, "ev:other", q)  # enqueued while the stream is open: filtered, not missed
    want = _enqueue(cv_url, "ev:want", q)
    wait_until(lambda: any(e["id"] == want for e in drained()), timeout=30, what="the last ev:want")
    return seen


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("ratelimit", "set", "{q}", "--rate", "0"), "--rate must be a finite number greater than 0"),
        (
            ("ratelimit", "set", "{q}", "--rate", "5/s", "--burst", "0"),
            "--burst must be between 1 and 2147483647",
        ),
        (("concurrency", "set", "{q}", "--limit", "0"), "--limit must be between 1 and 2147483647"),
        (("concurrency", "set", "{q}", "--limit", "2147483648"), "--limit must be between 1 and 2147483647"),
        (
            ("group", "set", "{q}", "--max-size", "0", "--max-delay", "2m", "--grace-period", "5s"),
            "--max-size must be between 1 and 2147483647, got 0",
        ),
        (
            ("group", "set", "{q}", "--max-size", "5", "--max-delay", "0", "--grace-period", "5s"),
            "--max-delay must be greater than 0",
        ),
    ],
    ids=["rate-0", "burst-0", "limit-0", "limit-int32", "max-size-0", "max-delay-0"],
)
def test_limit_values_out_of_range_say_the_range(cv_url: str, args: tuple[str, ...], says: str) -> None:
    """A value outside its range is one error line naming the range; conveyord is left unchanged."""
    q = f"rangeq{uuid.uuid4().hex[:6]}"
    proc = cli(cv_url, *(a.format(q=q) for a in args), ok=False)
    assert says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert q not in json.dumps(both(cv_url, args[0], "ls"))
