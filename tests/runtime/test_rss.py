"""--max-memory-per-child works where RSS can be measured and is refused where it cannot."""

from __future__ import annotations

import pytest

from conveyor_sdk._runtime import rss


def test_refused_where_the_platform_cannot_measure_memory() -> None:
    """A platform probe that finds no way to measure RSS makes the flag a one-line ValueError."""
    with pytest.raises(
        ValueError, match=r"--max-memory-per-child 512: .* cannot measure .*--max-tasks-per-child"
    ):
        rss.check_memory_limit(512, probe=lambda: None)
    rss.check_memory_limit(0, probe=lambda: None)  # not asked for: nothing to refuse


def test_accepted_where_getrusage_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without /proc (macOS), getrusage's peak RSS is used: the flag is accepted and reads > 0."""
    real_open = open

    def no_proc(path: object, *args: object, **kwargs: object) -> object:
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(rss.os.path, "exists", lambda path: False)
    monkeypatch.setattr("builtins.open", no_proc)
    assert rss.rss_source() == "getrusage"
    rss.check_memory_limit(512)
    assert rss.read_rss() > 1 << 20  # this interpreter's peak is well over a MiB


def test_proc_measures_the_current_rss() -> None:
    """On Linux the source is /proc and the reading is this process's RSS in bytes."""
    assert rss.rss_source() == "/proc"
    assert 1 << 20 < rss.read_rss() < 1 << 40
