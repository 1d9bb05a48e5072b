"""`conveyor tasks ls`: paging from a script (`--page-info`) and the client-side `--type` filter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conveyor_cli import tasks_list
from conveyor_sdk.client import SyncClient, task
from tests.cli_client._helpers import assert_one_line_error, run, run_json, uid


def _enqueue(url: str, queue: str, types: list[str]) -> dict[str, str]:
    """One scheduled task per entry of ``types``: {id: type}, ids newest first (the listing order)."""
    with SyncClient(url) as client:
        results = client.enqueue_batch([task(t, {"i": i}, queue=queue, process_in=3600) for i, t in
                                        enumerate(types)])  # fmt: skip
    by_id = {r.task.id: t for r, t in zip(results, types, strict=True) if r.task is not None}
    assert len(by_id) == len(types)
    return {i: by_id[i] for i in sorted(by_id, reverse=True)}


def _script_pages(url: str, *args: str) -> list[dict[str, object]]:
    """Page as a shell script would: a new `conveyor` process per page, the token fed back in."""
    env = {**os.environ, "CONVEYOR_ADDR": url}
    env.pop("CONVEYOR_TOKEN", None)
    pages: list[dict[str, object]] = []
    token = ""
    while True:
        cmd = [sys.executable, "-m", "conveyor_cli", "tasks", "ls", *args, "-o", "json", "--page-info"]
        done = subprocess.run([*cmd, "--page-token", token], env=env, capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        page = json.loads(done.stdout)
        assert set(page) == {"tasks", "next_page_token"}
        pages.append(page)
        token = str(page["next_page_token"])
        if not token:
            return pages
        assert len(pages) < 20, "the token never ran out"


def test_a_script_pages_through_every_task_with_the_token(url: str) -> None:
    """Three pages of 3, 3 and 1 tasks, newest first, each id once; the last token is empty."""
    queue = uid("q")
    ids = list(_enqueue(url, queue, ["t"] * 7))
    pages = _script_pages(url, "-q", queue, "-n", "3")
    assert [len(p["tasks"]) for p in pages] == [3, 3, 1]  # type: ignore[arg-type]
    assert [t["id"] for p in pages for t in p["tasks"]] == ids  # type: ignore[attr-defined]


def test_json_without_page_info_is_still_a_bare_array(url: str) -> None:
    """Scripts written for the old output keep working: `-o json` is a list of tasks."""
    queue = uid("q")
    ids = list(_enqueue(url, queue, ["t"] * 2))
    listed = run_json(url, "tasks", "ls", "-q", queue, "-n", "1")
    assert isinstance(listed, list) and [t["id"] for t in listed] == ids[:1]
    table = run(url, "tasks", "ls", "-q", queue, "-n", "1")
    assert table.exit_code == 0 and f"more: --page-token {ids[0]}" in table.stderr


def test_type_filter_fills_each_page_across_server_pages(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """--type keeps only that type, full pages of it, even when matches are spread over many reads."""
    monkeypatch.setattr(tasks_list, "SCAN_PAGE", 2)  # several ListTasks reads per printed page
    queue = uid("q")
    types = ["a", "b", "b", "a", "b", "a", "a", "b", "a"]
    by_id = _enqueue(url, queue, types)
    ids = list(by_id)
    wanted = [i for i in ids if by_id[i] == "a"]
    pages, token = [], ""
    while True:
        page = run_json(url, "tasks", "ls", "-q", queue, "--type", "a", "-n", "2", "--page-info",
                        "--page-token", token)  # fmt: skip
        pages.append([t["id"] for t in page["tasks"]])
        assert {t["type"] for t in page["tasks"]} <= {"a"}
        token = page["next_page_token"]
        if not token:
            break
    assert pages == [wanted[0:2], wanted[2:4], wanted[4:5]]
    every = run_json(url, "tasks", "ls", "-q", queue, "--type", "a", "--type", "b", "-n", "3", "--all")
    assert [t["id"] for t in every] == ids
    assert [t["id"] for t in run_json(url, "tasks", "ls", "-q", queue, "--task-type", "b", "--all")] == [
        i for i in ids if by_id[i] == "b"
    ]


def test_type_filter_ending_on_the_last_task_has_no_token(url: str) -> None:
    """A filtered page that ends on the queue's last task says there is no next page."""
    queue = uid("q")
    by_id = _enqueue(url, queue, ["a", "b", "a"])
    wanted = [i for i, t in by_id.items() if t == "a"]
    page = run_json(url, "tasks", "ls", "-q", queue, "--type", "a", "-n", "2", "--page-info")
    assert [t["id"] for t in page["tasks"]] == wanted and page["next_page_token"] == ""
    nothing = run_json(url, "tasks", "ls", "-q", queue, "--type", "zzz", "--page-info")
    assert nothing == {"tasks": [], "next_page_token": ""}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--page-info",), "--page-info shapes the JSON output: use it with -o json"),
        (("--type", ""), "--type needs a task type"),
    ],
)
def test_tasks_ls_bad_flags_are_one_line(url: str, args: tuple[str, ...], message: str) -> None:
    """--page-info without -o json, and an empty --type: one `error:` line, exit 1."""
    assert_one_line_error(run(url, "tasks", "ls", *args), message)
