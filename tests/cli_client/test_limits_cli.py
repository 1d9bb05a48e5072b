"""`conveyor ratelimit|concurrency|group set/ls/rm` against the reference server, as tables and JSON."""

from __future__ import annotations

import pytest

from conveyor_cli.limits_cmd import parse_rate
from tests.cli_client._helpers import assert_one_line_error, run, run_json, uid


def test_ratelimit_set_ls_rm(url: str) -> None:
    """set stores rate and burst (rate units converted to per second), ls lists, rm removes."""
    queue = uid("q")
    assert run_json(url, "enqueue", "t", "-q", queue)["queue"] == queue
    row = run_json(url, "ratelimit", "set", queue, "--rate", "120/m", "--burst", "10")
    assert row == [{"queue": queue, "rate_per_sec": 2.0, "burst": 10}]
    table = run(url, "ratelimit", "ls")
    assert table.exit_code == 0 and queue in table.stdout and "2/s" in table.stdout
    assert {"queue": queue, "rate_per_sec": 2.0, "burst": 10} in run_json(url, "ratelimit", "ls")
    removed = run(url, "ratelimit", "rm", queue)
    assert removed.exit_code == 0 and f"removed the rate limit of {queue}" in removed.stderr
    assert queue not in {r["queue"] for r in run_json(url, "ratelimit", "ls")}


def test_concurrency_set_ls_rm(url: str) -> None:
    """set stores max_active per key, ls lists, rm removes."""
    queue = uid("q")
    run_json(url, "enqueue", "t", "-q", queue)
    assert run_json(url, "concurrency", "set", queue, "--limit", "3") == [{"queue": queue, "max_active": 3}]
    table = run(url, "concurrency", "ls")
    assert table.exit_code == 0 and queue in table.stdout and "max active per key" in table.stdout
    assert {"queue": queue, "max_active": 3} in run_json(url, "concurrency", "ls")
    assert run_json(url, "concurrency", "rm", queue) == {"queue": queue, "removed": True}
    assert queue not in {r["queue"] for r in run_json(url, "concurrency", "ls")}


def test_group_set_ls_rm(url: str) -> None:
    """A named group and the queue-wide default (no GROUP) are set, listed and removed separately."""
    queue = uid("q")
    run_json(url, "enqueue", "t", "-q", queue)
    named = run_json(url, "group", "set", queue, "welcome", "--max-size", "20", "--max-delay", "2m",
                     "--grace-period", "5s")  # fmt: skip
    assert named == [
        {"queue": queue, "group": "welcome", "max_size": 20, "max_delay": 120.0, "grace_period": 5.0}
    ]
    default = run_json(url, "group", "set", queue, "--max-size", "5", "--max-delay", "1m", "--grace", "1s")
    assert default[0]["group"] == "" and default[0]["max_size"] == 5
    table = run(url, "group", "ls")
    assert table.exit_code == 0 and "(queue default)" in table.stdout and "welcome" in table.stdout
    removed = run_json(url, "group", "rm", queue, "welcome")
    assert removed == {"queue": queue, "group": "welcome", "removed": True}
    left = [g for g in run_json(url, "group", "ls") if g["queue"] == queue]
    assert [g["group"] for g in left] == [""]
    assert run(url, "group", "rm", queue).exit_code == 0
    assert not [g for g in run_json(url, "group", "ls") if g["queue"] == queue]


def test_set_on_an_unknown_queue_warns_but_applies(url: str) -> None:
    """A queue with no tasks and no worker gets a warning on stderr; the limit is still set."""
    queue = uid("q")
    result = run(url, "concurrency", "set", queue, "--limit", "2")
    assert result.exit_code == 0 and result.stderr.startswith("warning:") and "no tasks" in result.stderr
    assert {"queue": queue, "max_active": 2} in run_json(url, "concurrency", "ls")
    assert run(url, "concurrency", "rm", queue).exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ratelimit", "set", "q", "--rate", "-5"), "--rate must be a finite number greater than 0"),
        (("ratelimit", "set", "q", "--rate", "0/s"), "--rate must be a finite number greater than 0"),
        (("ratelimit", "set", "q", "--rate", "1e999"), "--rate must be a finite number greater than 0"),
        (("ratelimit", "set", "q", "--rate", "fast"), "use tasks per second"),
        (
            ("ratelimit", "set", "q", "--rate", "5", "--burst", "0"),
            "--burst must be between 1 and 2147483647, got 0",
        ),
        (
            ("ratelimit", "set", "q", "--rate", "5", "--burst", "2147483648"),
            "--burst must be between 1 and 2147483647, got 2147483648",
        ),
        (("ratelimit", "set", "bad queue", "--rate", "5"), "invalid queue name"),
        (("ratelimit", "rm", "no-such-queue"), "has no rate limit"),
        (("concurrency", "set", "q", "--limit", "0"), "--limit must be between 1 and 2147483647, got 0"),
        (("concurrency", "set", "q", "--limit", "-1"), "--limit must be between 1 and 2147483647, got -1"),
        (("concurrency", "set", "q", "--limit", "4294967296"), "--limit must be between 1 and 2147483647"),
        (("concurrency", "rm", "no-such-queue"), "has no concurrency limit"),
        (
            ("group", "set", "q", "--max-size", "3"),
            "group set needs --max-delay D (> 0, e.g. 1m), --grace-period D (> 0, e.g. 10s)",
        ),
        (("group", "set", "q", "g"), "group set needs --max-size N (1..2147483647), --max-delay D"),
        (
            ("group", "set", "q", "g", "--max-size", "0", "--max-delay", "1m", "--grace", "1s"),
            "--max-size must be between 1 and 2147483647, got 0",
        ),
        (
            ("group", "set", "q", "--max-size", "-1", "--max-delay", "1m", "--grace", "1s"),
            "--max-size must be between 1 and 2147483647, got -1",
        ),
        (
            ("group", "set", "q", "--max-size", "2147483648", "--max-delay", "1m", "--grace", "1s"),
            "--max-size must be between 1 and 2147483647, got 2147483648",
        ),
        (
            ("group", "set", "q", "--max-size", "3", "--max-delay", "soon", "--grace", "1s"),
            "--max-delay: invalid duration",
        ),
        (
            ("group", "set", "q", "--max-size", "3", "--max-delay", "0s", "--grace", "1s"),
            "--max-delay must be greater than 0 and at most 315576000000 s",
        ),
        (
            ("group", "set", "q", "--max-size", "3", "--max-delay", "1m", "--grace", "inf"),
            "--grace-period must be greater than 0",
        ),
        (
            ("group", "set", "q", "--max-size", "3", "--max-delay", "99999999h", "--grace", "1s"),
            "at most 315576000000 s (10,000 years)",
        ),
        (("group", "rm", "no-such-queue", "g"), "has no override for group 'g'"),
    ],
)
def test_limits_bad_input_is_one_line(url: str, args: tuple[str, ...], message: str) -> None:
    """Out-of-range numbers (the error says the range), bad names, removing unset ones: one line, exit 1."""
    assert_one_line_error(run(url, *args), message)


def test_parse_rate_units() -> None:
    """Rates accept per-second, per-minute and per-hour forms."""
    assert [parse_rate(t) for t in ("50", "50/s", "120/m", "3600/h", "0.5")] == [50, 50, 2, 1, 0.5]
