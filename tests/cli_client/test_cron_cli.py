"""`conveyor cron add/ls/get/pause/resume/rm` against the reference server, as tables and JSON."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from conveyor_sdk.client import SyncClient
from tests._util import wait_until
from tests.cli_client._helpers import assert_one_line_error, run, run_json, uid


def test_cron_add_shows_next_fire_and_materializes_tasks(url: str) -> None:
    """add stores payload and options, shows the next fire time, and the entry really enqueues tasks."""
    cid, queue = uid("cron"), uid("q")
    entry = run_json(
        url, "cron", "add", cid, "* * * * * *", "report:daily", "--json", '{"day": 1}', "-q", queue,
        "-p", "7", "--max-retry", "2", "--timeout", "30s", "--retention", "1h",
    )  # fmt: skip
    assert (entry["id"], entry["spec"], entry["type"], entry["queue"]) == (
        cid,
        "* * * * * *",
        "report:daily",
        queue,
    )
    assert entry["payload"] == {"day": 1} and entry["content_type"] == "application/json"
    assert (entry["priority"], entry["max_retry"], entry["timeout"], entry["retention"]) == (
        7,
        2,
        30.0,
        3600.0,
    )
    assert entry["next_run_at"] is not None and entry["paused"] is False
    next_run = datetime.fromisoformat(entry["next_run_at"])
    assert abs((next_run - datetime.now(UTC)).total_seconds()) < 5
    with SyncClient(url) as client:
        made = wait_until(lambda: client.admin.list_tasks(queue=queue).tasks, timeout=15, what="a cron task")
    assert made[0].type == "report:daily" and made[0].priority == 7 and made[0].payload == b'{"day":1}'
    assert run(url, "cron", "rm", cid).exit_code == 0


def test_cron_ls_get_pause_resume_rm(url: str) -> None:
    """ls lists with the next run, pause clears it from the table, resume re-arms, rm removes."""
    cid = uid("cron")
    assert run(url, "cron", "add", cid, "0 0 2 * * *", "nightly").exit_code == 0
    table = run(url, "cron", "ls")
    assert table.exit_code == 0 and cid in table.stdout and "0 0 2 * * *" in table.stdout
    assert "02:00:00Z (in " in table.stdout  # the next fire time, relative to now
    listed = {e["id"]: e for e in run_json(url, "cron", "ls")}
    assert listed[cid]["next_run_at"].endswith("T02:00:00Z")
    paused = run_json(url, "cron", "pause", cid)
    assert paused["paused"] is True
    assert "True" in run(url, "cron", "get", cid).stdout  # the paused row of the table
    resumed = run_json(url, "cron", "resume", cid)
    assert resumed["paused"] is False and resumed["next_run_at"].endswith("T02:00:00Z")
    assert run_json(url, "cron", "get", cid)["id"] == cid
    assert run_json(url, "cron", "rm", cid) == {"id": cid, "deleted": True}
    assert cid not in {e["id"] for e in run_json(url, "cron", "ls")}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("cron", "add", "c1", "bad spec", "t"), "invalid_argument: invalid cron spec 'bad spec'"),
        (("cron", "add", "c1", "0 0 25 * * *", "t"), "invalid cron spec"),
        (("cron", "add", "c1", "* * * * * *", "t", "-q", "bad queue"), "invalid queue name"),
        (("cron", "add", "c1", "* * * * * *", "t", "--json", "{x"), "--json is not valid JSON"),
        (
            ("cron", "add", "c1", "* * * * * *", "t", "--group", "g", "--concurrency-key", "k"),
            "mutually exclusive",
        ),
        (("cron", "get", "no-such-entry"), "no cron entry 'no-such-entry'"),
        (("cron", "pause", "no-such-entry"), "no cron entry"),
        (("cron", "resume", "no-such-entry"), "no cron entry"),
        (("cron", "rm", "no-such-entry"), "no cron entry"),
    ],
)
def test_cron_bad_input_is_one_line(url: str, args: tuple[str, ...], message: str) -> None:
    """A bad spec shows the server's reason; other mistakes are one `error:` line, exit 1."""
    assert_one_line_error(run(url, *args), message)
