"""`conveyor events`: a real child process watching WatchEvents while a worker runs tasks."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from conveyor_sdk.client import SyncClient
from conveyor_sdk.worker import Registry
from conveyor_server_min.testing import ServerProcess
from tests.cli_client._helpers import Lines, assert_one_line_error, run, spawn, uid
from tests.cli_client._worker import worker_thread
from tests.conftest import FAST_ARGS


@pytest.fixture
def watchers() -> Iterator[Callable[..., tuple[subprocess.Popen[str], Lines, Lines]]]:
    """Start `conveyor events` children; each must end on SIGINT with exit 0."""
    started: list[tuple[subprocess.Popen[str], Lines, Lines]] = []

    def start(url: str, *args: str) -> tuple[subprocess.Popen[str], Lines, Lines]:
        proc = spawn(url, "events", *args)
        assert proc.stdout is not None and proc.stderr is not None
        started.append((proc, Lines(proc.stdout), Lines(proc.stderr)))
        return started[-1]

    yield start
    for proc, out, err in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        out.close()
        err.close()


def _until_streaming(lines: Lines, make_event: Callable[[], str], timeout: float = 30.0) -> None:
    """Cause events until the watcher prints one: its WatchEvents stream is then surely subscribed.

    "watching" is printed once the server answers, which can be a moment before the stream's
    subscription exists; events in that gap are (correctly) never shown.
    """
    deadline = time.monotonic() + timeout
    while True:
        marker = make_event()
        try:
            lines.expect(lambda line, m=marker: m in line, timeout=1.0)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def _stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(20)


def _event(line: str) -> dict[str, object]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def test_events_follow_a_task_to_completed(server_url: str, watchers: Callable[..., tuple]) -> None:
    """JSON lines show enqueued -> leased -> completed while a real worker runs the task; Ctrl-C exits 0."""
    queue = uid("q")
    proc, out, err = watchers(server_url, "-o", "json", "--queue", queue)
    err.expect(lambda line: "watching" in line)
    reg = Registry()
    reg.handler("work")(lambda task, ctx: b"done")
    with SyncClient(server_url) as client, worker_thread(server_url, reg, [queue]):
        _until_streaming(out, lambda: client.enqueue("warm-up", None, queue=queue, process_in=3600).id)
        tid = client.enqueue("work", {"n": 1}, queue=queue).id
        kinds = []
        for kind in ("enqueued", "leased", "completed"):
            line = out.expect(
                lambda line, k=kind: _event(line).get("event") == k and _event(line)["id"] == tid
            )
            kinds.append(_event(line))
    assert [e["state"] for e in kinds] == ["pending", "active", "completed"]
    assert all(e["queue"] == queue and e["type"] == "work" and e["occurred_at"] for e in kinds)
    assert _stop(proc) == 0


def test_events_filters_and_text_lines(server_url: str, watchers: Callable[..., tuple]) -> None:
    """--type filters on the server, --task and --state here; off a TTY each event is one plain line."""
    queue = uid("q")
    proc, out, err = watchers(server_url, "--queue", queue, "--type", "enqueued", "--type", "canceled")
    typed, typed_out, typed_err = watchers(server_url, "--queue", queue, "--state", "canceled", "-o", "json")
    err.expect(lambda line: "watching" in line)
    typed_err.expect(lambda line: "watching" in line)

    def canceled() -> str:
        tid = client.enqueue("warm-up", None, queue=queue, process_in=3600).id
        client.admin.cancel_task(tid)
        return tid

    with SyncClient(server_url) as client:
        _until_streaming(out, canceled)
        _until_streaming(typed_out, canceled)
        first = client.enqueue("t", None, queue=queue, process_in=3600).id
        client.admin.cancel_task(first)
        second = client.enqueue("t", None, queue=queue).id
    line = out.expect(lambda line: second in line)
    assert "enqueued" in line and queue in line and "pending" in line
    assert any(first in seen and "canceled" in seen for seen in out.seen)
    assert not any("scheduled" in seen for seen in out.seen)  # the `scheduled` event was filtered out
    canceled = typed_out.expect(lambda line: bool(_event(line)))
    assert _event(canceled)["id"] == first and _event(canceled)["event"] == "canceled"
    assert _stop(proc) == 0 and _stop(typed) == 0
    assert all(_event(seen).get("state") == "canceled" for seen in typed_out.seen)


def test_events_reconnects_after_a_server_restart(
    server_factory: Callable[..., ServerProcess], watchers: Callable[..., tuple]
) -> None:
    """When the server restarts on the same port, events says so, reconnects and keeps streaming."""
    first = server_factory(FAST_ARGS)
    port = first.url.rsplit(":", 1)[1]
    proc, out, err = watchers(first.url, "-o", "json")
    err.expect(lambda line: "watching" in line)
    assert first.stop() == 0
    err.expect(lambda line: "connection lost" in line and "reconnecting" in line)
    second = server_factory([*FAST_ARGS, "--port", port])
    assert second.url == first.url
    err.expect(lambda line: "reconnected" in line and "not replayed" in line, timeout=30)
    with SyncClient(second.url) as client:
        _until_streaming(out, lambda: client.enqueue("after-restart", None).id)
    assert _stop(proc) == 0


def test_events_bad_input(server_url: str) -> None:
    """An unknown event type or state, or an unreachable server: one `error:` line, exit 1."""
    assert_one_line_error(run(server_url, "events", "--type", "exploded"), "unknown event type 'exploded'")
    assert_one_line_error(run(server_url, "events", "--state", "sleepy"), "unknown task state 'sleepy'")
    assert_one_line_error(run(server_url, "events", "--queue", "bad queue"), "invalid queue name")
    assert_one_line_error(run("http://127.0.0.1:9", "events"), "unavailable")


def test_events_on_a_terminal_are_coloured_lines(server_url: str) -> None:
    """On a real pty each event is one ANSI-coloured line; SIGINT still exits 0."""
    main, child_end = pty.openpty()
    cmd = [sys.executable, "-m", "conveyor_cli", "events", "--server", server_url]
    proc = subprocess.Popen(cmd, stdin=child_end, stdout=child_end, stderr=child_end)
    os.close(child_end)
    seen, tids = b"", []
    try:
        deadline = time.monotonic() + 30
        with SyncClient(server_url) as client:
            while time.monotonic() < deadline and not any(t.encode() in seen for t in tids):
                if b"watching" in seen:  # until the subscription is live, events are (rightly) not shown
                    tids.append(client.enqueue("t", {"a": "[b]"}, process_in=3600).id)
                if select.select([main], [], [], 0.5)[0]:
                    seen += os.read(main, 4096)
        assert _stop(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(main)
    line = next(x for x in seen.decode().splitlines() if any(t in x for t in tids))
    assert line.startswith("\x1b[") and "scheduled" in line and "attempt=0" in line


def test_events_task_type_filter(server_url: str, watchers: Callable[..., tuple]) -> None:
    """--task-type (repeatable) shows only events of tasks of those types; --type stays the event type."""
    queue = uid("q")
    proc, out, err = watchers(server_url, "-o", "json", "--queue", queue, "--task-type", "mail",
                              "--task-type", "sms", "--type", "scheduled")  # fmt: skip
    err.expect(lambda line: "watching" in line)
    with SyncClient(server_url) as client:
        _until_streaming(out, lambda: client.enqueue("mail", None, queue=queue, process_in=3600).id)
        other = client.enqueue("push", None, queue=queue, process_in=3600).id
        sms = client.enqueue("sms", None, queue=queue, process_in=3600).id
        due = client.enqueue("mail", None, queue=queue).id  # an `enqueued` event: not a `scheduled` one
        last = client.enqueue("mail", None, queue=queue, process_in=3600).id
    out.expect(lambda line: _event(line).get("id") == last)
    shown = [_event(line) for line in out.seen if _event(line)]
    assert sms in {e["id"] for e in shown}
    assert not {other, due} & {e["id"] for e in shown}
    assert {e["type"] for e in shown} <= {"mail", "sms"} and {e["event"] for e in shown} == {"scheduled"}
    assert _stop(proc) == 0
    assert_one_line_error(run(server_url, "events", "--task-type", ""), "--task-type needs a task type")
