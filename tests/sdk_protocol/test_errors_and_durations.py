"""The error tree mirrors the wire codes; durations parse the forms the CLI and server accept."""

from __future__ import annotations

from datetime import timedelta

import pytest

from conveyor_sdk.durations import format_duration, parse_duration
from conveyor_sdk.errors import (
    AlreadyExists,
    Code,
    ConveyorError,
    DuplicateTask,
    Unavailable,
    error_for_code,
)


def test_codes_mirror_connect_and_grpc() -> None:
    """Each Code has its Connect name, gRPC number and HTTP status, and round-trips."""
    assert Code.INVALID_ARGUMENT.connect_name == "invalid_argument" and Code.INVALID_ARGUMENT.grpc == 3
    assert Code.UNAUTHENTICATED.grpc == 16 and Code.UNAUTHENTICATED.http_status == 401
    for code in Code:
        assert Code.from_grpc(code.grpc) is code
        assert Code.from_connect(code.connect_name) is code
    assert Code.from_grpc(99) is Code.UNKNOWN and Code.from_connect("nope") is Code.UNKNOWN


def test_every_code_builds_a_typed_error() -> None:
    """error_for_code returns a ConveyorError whose code is the one asked for."""
    for code in Code:
        err = error_for_code(code, "m")
        assert isinstance(err, ConveyorError) and err.code is code and err.message == "m"
    assert isinstance(error_for_code(Code.ALREADY_EXISTS), DuplicateTask)
    assert DuplicateTask is AlreadyExists


def test_retryable_defaults_and_override() -> None:
    """Unavailable is retryable by default; others are not unless said so."""
    assert Unavailable("down").retryable
    assert not AlreadyExists("dup").retryable
    assert AlreadyExists("dup", retryable=True).retryable
    assert str(Unavailable("down")) == "[unavailable] down"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2s", 2.0),
        ("500ms", 0.5),
        ("1m", 60.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("3", 3.0),
        ("250us", 0.00025),
    ],
)
def test_parse_duration_forms(text: str, seconds: float) -> None:
    """Go-style duration strings and bare numbers parse to seconds."""
    assert parse_duration(text) == pytest.approx(seconds)


def test_parse_duration_rejects_garbage_and_negatives() -> None:
    """Malformed or negative durations raise ValueError with a hint."""
    for bad in ("", "2x", "s", "-1s", "1s2"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)
    assert parse_duration(timedelta(milliseconds=250)) == 0.25


def test_format_duration() -> None:
    """Durations print compactly."""
    assert [format_duration(s) for s in (0.25, 2, 120, 90)] == ["250ms", "2s", "2m", "90s"]
