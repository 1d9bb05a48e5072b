"""Pure dashboard helpers: payload preview by content type, relative times, redirects, throughput."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from conveyor_cli.dashboard.events import EventFeed
from conveyor_cli.dashboard.render import PREVIEW_LIMIT, ago, payload_preview
from conveyor_cli.dashboard.security import cookie_value, safe_next
from conveyor_cli.dashboard.views import actions_for
from conveyor_sdk.client import TaskEvent, TaskEventType
from conveyor_sdk.types import TaskState


@pytest.mark.parametrize(
    ("payload", "content_type", "kind", "text"),
    [
        (b'{"a":[1,2]}', "application/json", "json", '{\n  "a": [\n    1,\n    2\n  ]\n}'),
        (b'{"a":1}', "", "json", '{\n  "a": 1\n}'),
        (b"{not json", "application/json", "text", "{not json"),
        (msgspec.msgpack.encode({"k": "v"}), "application/x-msgpack", "json", '{\n  "k": "v"\n}'),
        ("héllo".encode(), "text/plain; charset=utf-8", "text", "héllo"),
        (b"\x00\x01AB", "application/octet-stream", "hex", "00000000  00 01 41 42"),
        (b"\xff\xfe", "text/plain", "hex", "00000000  ff fe"),
        (b"", "application/json", "empty", ""),
    ],
)
def test_payload_preview_by_content_type(payload: bytes, content_type: str, kind: str, text: str) -> None:
    """JSON/msgpack pretty-printed, text decoded, anything else (or undecodable) as a hex dump."""
    preview = payload_preview(payload, content_type)
    assert preview["kind"] == kind
    assert preview["text"].startswith(text)
    assert preview["size"] == len(payload)


def test_large_payload_is_truncated_but_sized() -> None:
    """Past the preview limit only the head is shown (as text), with the real size and a flag."""
    payload = b'"' + b"x" * (PREVIEW_LIMIT + 10) + b'"'
    preview = payload_preview(payload, "application/json")
    assert preview["truncated"] and preview["size"] == len(payload)
    assert len(preview["text"]) == PREVIEW_LIMIT


def test_ago() -> None:
    """Relative times in the past and the future; None is blank."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert ago(now - timedelta(seconds=5), now) == "5s ago"
    assert ago(now + timedelta(minutes=3, seconds=1), now) == "in 3m"
    assert ago(now - timedelta(days=2), now) == "2d ago"
    assert ago(None, now) == ""


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/tasks/x", "/tasks/x"),
        ("//evil.example", "/"),
        ("https://evil.example/", "/"),
        ("/\\evil", "/"),
        ("", "/"),
    ],
)
def test_safe_next(target: str, expected: str) -> None:
    """Login redirects stay on this site."""
    assert safe_next(target) == expected


def test_cookie_is_not_the_token() -> None:
    """The session cookie is a fixed-length HMAC that does not contain the token."""
    value = cookie_value("s3cret-token")
    assert "s3cret" not in value and len(value) == 64 and value != cookie_value("other")


def test_actions_for_states() -> None:
    """Only actions that fit the state are offered (the server still decides)."""
    assert actions_for(TaskState.ACTIVE) == ["cancel"]
    assert "delete" in actions_for(TaskState.COMPLETED) and "cancel" not in actions_for(TaskState.COMPLETED)
    assert actions_for(TaskState.SCHEDULED) == ["run", "cancel", "archive", "reschedule", "delete"]


def test_feed_throughput_and_bound() -> None:
    """COMPLETED events of the last minute count per queue (all of them); the ring buffer stays bounded."""
    feed = EventFeed(client=None, size=5)  # type: ignore[arg-type]  # the consumer is not started
    for n in range(8):
        kind = TaskEventType.COMPLETED if n % 2 else TaskEventType.LEASED
        feed.add(TaskEvent(id=str(n), queue="q", type="t", state=TaskState.COMPLETED, event_type=kind))
    assert len(feed.recent()) == 5
    assert [e.id for e in feed.recent(2)] == ["7", "6"]
    assert feed.completed_per_minute() == {"q": 4}  # counted apart from the ring buffer
    assert feed.completed_per_minute(now=10**9) == {}
